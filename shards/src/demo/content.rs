//! The demo origin's site: the paper's set (§6.1) — pages with three embedded
//! images of about 41 KB each — generated deterministically, so the origin
//! serves and the clients check the very same bytes.

use coral::rng::Rng;

/// Image width in pixels (24-bit rows of 384 bytes need no padding).
const IMAGE_WIDTH_PX: u32 = 128;
/// Image height in pixels: 128 × 109 × 3 + 54 = 41,910 bytes, the paper's 41 KB.
const IMAGE_HEIGHT_PX: u32 = 109;
/// A BMP file header plus its BITMAPINFOHEADER.
const BMP_HEADER_BYTES: u32 = 54;
/// Images embedded in each page (§6.1: three).
pub const IMAGES_PER_PAGE: usize = 3;

/// One object the origin serves.
pub struct Object {
    /// Origin-form path, e.g. `/img7.bmp`.
    pub path: String,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
}

/// The site: `pages` HTML pages, and `images` images spread three to a page.
pub struct Site {
    /// The pages, `/page0.html` ...
    pub pages: Vec<Object>,
    /// The images, `/img0.bmp` ...
    pub images: Vec<Object>,
}

impl Site {
    /// `images` images (at least one) on `ceil(images / 3)` pages.
    pub fn new(images: usize) -> Site {
        let images = images.max(1);
        let image_objects: Vec<Object> = (0..images)
            .map(|k| Object {
                path: format!("/img{k}.bmp"),
                content_type: "image/bmp",
                body: bmp(k as u64),
            })
            .collect();
        let pages = images.div_ceil(IMAGES_PER_PAGE);
        let page_objects = (0..pages)
            .map(|p| {
                let mut html = format!(
                    "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>coral demo page {p}</title></head>\n\
                     <body style=\"font-family:sans-serif\">\n<h1>coral demo: page {p}</h1>\n\
                     <p>Three images of 41 KB from an origin on a 384 kbit/s line, served through CoralCDN (NSDI 2004 &sect;6.1).</p>\n"
                );
                for k in Self::page_images_of(p, images) {
                    html.push_str(&format!(
                        "<img src=\"/img{k}.bmp\" width=\"256\" height=\"218\" alt=\"image {k}\">\n"
                    ));
                }
                html.push_str("</body></html>\n");
                Object {
                    path: format!("/page{p}.html"),
                    content_type: "text/html; charset=utf-8",
                    body: html.into_bytes(),
                }
            })
            .collect();
        Site {
            pages: page_objects,
            images: image_objects,
        }
    }

    /// The image indices embedded in page `p` of a site with `images` images.
    fn page_images_of(p: usize, images: usize) -> std::ops::Range<usize> {
        let start = p * IMAGES_PER_PAGE;
        start.min(images)..(start + IMAGES_PER_PAGE).min(images)
    }

    /// The image indices embedded in page `p`.
    pub fn page_images(&self, p: usize) -> std::ops::Range<usize> {
        Self::page_images_of(p, self.images.len())
    }

    /// The object at `path`, if any.
    pub fn get(&self, path: &str) -> Option<&Object> {
        self.pages
            .iter()
            .chain(self.images.iter())
            .find(|o| o.path == path)
    }
}

/// A 24-bit BMP of [`IMAGE_WIDTH_PX`] × [`IMAGE_HEIGHT_PX`]: a gradient in a
/// colour of its own with the image's number drawn as bars, plus noise so no
/// two images share bytes.
fn bmp(k: u64) -> Vec<u8> {
    let row_bytes = IMAGE_WIDTH_PX * 3;
    let pixel_bytes = row_bytes * IMAGE_HEIGHT_PX;
    let file_bytes = BMP_HEADER_BYTES + pixel_bytes;
    let mut out = Vec::with_capacity(file_bytes as usize);
    out.extend_from_slice(b"BM");
    out.extend_from_slice(&file_bytes.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&BMP_HEADER_BYTES.to_le_bytes());
    out.extend_from_slice(&40u32.to_le_bytes());
    out.extend_from_slice(&IMAGE_WIDTH_PX.to_le_bytes());
    out.extend_from_slice(&IMAGE_HEIGHT_PX.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&24u16.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&pixel_bytes.to_le_bytes());
    out.extend_from_slice(&2835u32.to_le_bytes());
    out.extend_from_slice(&2835u32.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    let mut rng = Rng::new(0x0C04_A1DE ^ k);
    let hue = [(k * 97) % 256, (k * 57 + 80) % 256, (k * 23 + 160) % 256];
    for y in 0..IMAGE_HEIGHT_PX {
        for x in 0..IMAGE_WIDTH_PX {
            // Bars: image k shows k + 1 dark stripes across the middle.
            let stripe = y > 40 && y < 70 && (x / 8) % 2 == 0 && (x / 16) <= k as u32;
            let noise = (rng.next_u64() & 0x0f) as u32;
            for c in hue {
                let v = if stripe {
                    noise
                } else {
                    ((c as u32 + x + y) % 256 + noise).min(255)
                };
                out.push(v as u8);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nsdi2004_6_1_twelve_images_of_41_kb_three_to_a_page() {
        let site = Site::new(12);
        assert_eq!(site.pages.len(), 4);
        assert_eq!(site.images.len(), 12);
        for img in &site.images {
            assert_eq!(img.body.len(), 41_910);
            assert_eq!(&img.body[..2], b"BM");
        }
        for p in 0..4 {
            let html = std::str::from_utf8(&site.pages[p].body).unwrap();
            for k in site.page_images(p) {
                assert!(html.contains(&format!("src=\"/img{k}.bmp\"")));
            }
        }
        // Deterministic, and distinct.
        assert_eq!(Site::new(12).images[5].body, site.images[5].body);
        assert_ne!(site.images[4].body, site.images[5].body);
        assert!(site.get("/img11.bmp").is_some() && site.get("/img12.bmp").is_none());
    }
}
