//! Where simulated nodes sit on the globe, and the wide-area round-trip
//! times (RTTs) that follow.
//!
//! The paper's experiments (§6) ran on 166 PlanetLab machines
//! "geographically distributed mainly over North America and Europe", plus
//! five in Asia. [`World::planetlab`] places any number of nodes on a table of
//! PlanetLab-like [`SITES`] in the same regional proportions, several nodes to
//! a site, and [`World::rtt`] prices every pair from geography:
//!
//! - the great-circle (haversine) distance between the two nodes, at the
//!   speed of light in fibre, stretched by a route-inflation factor (real
//!   paths are not straight; short ones are stretched relatively more),
//! - a few milliseconds of router and queueing delay between distinct sites,
//! - a per-site detour for sites whose traffic reaches the backbone the long
//!   way round (Athens, Manila),
//! - each node's own last-mile access delay (a few percent of nodes are
//!   poorly connected), and
//! - a small jitter derived by hashing the pair.
//!
//! Calibrated so that a 60 ms threshold splits eastern US / western US /
//! Europe, and a 20 ms threshold yields regional clusters (California, the
//! Pacific Northwest, the Northeast Corridor, ...), as the paper's Fig. 7
//! found; see the tests at the bottom for the numbers.
//!
//! Architecture Invariant: `rtt` is O(1) and stores nothing per pair, so a
//! 10,000-node world costs one small record per node.

use std::net::{IpAddr, Ipv4Addr};

use crate::rng::Rng;
use crate::sim::net::{HintPath, Links};
use crate::time::Duration;

/// A broad geographic region of the PlanetLab testbed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Region {
    /// The eastern US: the Northeast Corridor (North Carolina to
    /// Massachusetts), upstate New York, Pittsburgh and the Southeast.
    UsEast,
    /// The central US: the Midwest, St Louis, Minneapolis and Texas.
    UsCentral,
    /// The western US: California, the Pacific Northwest and the mountain
    /// states.
    UsWest,
    /// Europe.
    Europe,
    /// Asia: Hong Kong, Taiwan, Japan and the Philippines.
    Asia,
}

impl Region {
    /// Every region, in table order.
    pub const ALL: [Region; 5] = [
        Region::UsEast,
        Region::UsCentral,
        Region::UsWest,
        Region::Europe,
        Region::Asia,
    ];

    /// A short human-readable name.
    pub fn name(self) -> &'static str {
        match self {
            Region::UsEast => "eastern US",
            Region::UsCentral => "central US",
            Region::UsWest => "western US",
            Region::Europe => "Europe",
            Region::Asia => "Asia",
        }
    }

    /// True for the regions the paper's level-1 (60 ms) "eastern US"
    /// cluster drew from: the east coast and the Midwest / South.
    pub fn is_eastern_or_central_us(self) -> bool {
        matches!(self, Region::UsEast | Region::UsCentral)
    }
}

/// A PlanetLab-like site: a university or lab hosting a few nodes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Site {
    /// Institution and city.
    pub name: &'static str,
    /// Its region.
    pub region: Region,
    /// Latitude in degrees (north positive).
    pub lat: f64,
    /// Longitude in degrees (east positive).
    pub lon: f64,
    /// How many nodes the site hosts in a 166-node world; its share of any
    /// other size is proportional.
    pub weight: u32,
    /// Extra one-way delay, in milliseconds, for traffic leaving the site
    /// to reach the wide-area backbone (a long tail circuit); zero for most.
    pub detour_ms: f64,
}

const fn site(
    name: &'static str,
    region: Region,
    lat: f64,
    lon: f64,
    weight: u32,
    detour_ms: f64,
) -> Site {
    Site {
        name,
        region,
        lat,
        lon,
        weight,
        detour_ms,
    }
}

/// The site table, grouped by region (so that placing nodes in table order
/// keeps every region within one node of its exact share). Weights sum to
/// 166: 96 in the eastern and central US, 41 in the western US, 24 in
/// Europe and 5 in Asia.
pub const SITES: &[Site] = {
    use Region::*;
    &[
        // Eastern US: the Northeast Corridor, upstate New York, Pittsburgh,
        // the Southeast.
        site("MIT, Cambridge MA", UsEast, 42.360, -71.092, 3, 0.0),
        site("Harvard, Cambridge MA", UsEast, 42.377, -71.117, 2, 0.0),
        site("Boston University", UsEast, 42.350, -71.105, 2, 0.0),
        site("Brown, Providence", UsEast, 41.826, -71.403, 2, 0.0),
        site("Yale, New Haven", UsEast, 41.316, -72.922, 2, 0.0),
        site("Columbia, New York", UsEast, 40.808, -73.962, 3, 0.0),
        site("NYU, New York", UsEast, 40.729, -73.997, 3, 0.0),
        site("Stony Brook, Long Island", UsEast, 40.912, -73.123, 2, 0.0),
        site("Princeton, New Jersey", UsEast, 40.343, -74.655, 3, 0.0),
        site("Rutgers, New Brunswick", UsEast, 40.501, -74.447, 2, 0.0),
        site("UPenn, Philadelphia", UsEast, 39.952, -75.193, 3, 0.0),
        site("Johns Hopkins, Baltimore", UsEast, 39.329, -76.620, 2, 0.0),
        site("U Maryland, College Park", UsEast, 38.986, -76.942, 3, 0.0),
        site(
            "George Washington U, Washington DC",
            UsEast,
            38.900,
            -77.049,
            2,
            0.0,
        ),
        site(
            "U Virginia, Charlottesville",
            UsEast,
            38.034,
            -78.508,
            2,
            0.0,
        ),
        site("Duke, Durham NC", UsEast, 36.001, -78.939, 3, 0.0),
        site("UNC, Chapel Hill", UsEast, 35.905, -79.047, 2, 0.0),
        site("Cornell, Ithaca", UsEast, 42.447, -76.483, 2, 0.0),
        site("U Rochester", UsEast, 43.128, -77.629, 2, 0.0),
        site(
            "Carnegie Mellon, Pittsburgh",
            UsEast,
            40.443,
            -79.943,
            3,
            0.0,
        ),
        site("U Pittsburgh", UsEast, 40.444, -79.960, 2, 0.0),
        site("Georgia Tech, Atlanta", UsEast, 33.776, -84.398, 3, 0.0),
        site("U Florida, Gainesville", UsEast, 29.648, -82.344, 2, 0.0),
        // Central US: the Midwest, the South.
        site(
            "Case Western, Cleveland",
            UsCentral,
            41.504,
            -81.608,
            2,
            0.0,
        ),
        site("Ohio State, Columbus", UsCentral, 40.007, -83.030, 2, 0.0),
        site("U Michigan, Ann Arbor", UsCentral, 42.278, -83.738, 3, 0.0),
        site("Notre Dame, Indiana", UsCentral, 41.703, -86.239, 2, 0.0),
        site("Purdue, West Lafayette", UsCentral, 40.424, -86.921, 3, 0.0),
        site("U Chicago", UsCentral, 41.790, -87.600, 3, 0.0),
        site("Northwestern, Evanston", UsCentral, 42.055, -87.675, 2, 0.0),
        site("UIUC, Urbana", UsCentral, 40.102, -88.227, 3, 0.0),
        site("UW Madison", UsCentral, 43.076, -89.412, 3, 0.0),
        site(
            "U Minnesota, Minneapolis",
            UsCentral,
            44.974,
            -93.227,
            2,
            0.0,
        ),
        site("Iowa State, Ames", UsCentral, 42.027, -93.648, 2, 0.0),
        site("Washington U, St Louis", UsCentral, 38.648, -90.305, 3, 0.0),
        site("Vanderbilt, Nashville", UsCentral, 36.145, -86.803, 2, 0.0),
        site("U Kansas, Lawrence", UsCentral, 38.958, -95.247, 1, 0.0),
        site("U Oklahoma, Norman", UsCentral, 35.208, -97.446, 1, 0.0),
        site("Rice, Houston", UsCentral, 29.717, -95.402, 2, 0.0),
        site(
            "Texas A&M, College Station",
            UsCentral,
            30.618,
            -96.336,
            2,
            0.0,
        ),
        site("UT Austin", UsCentral, 30.284, -97.734, 3, 0.0),
        // Western US: California, the Pacific Northwest, the mountain states.
        site("UC Berkeley", UsWest, 37.872, -122.259, 3, 0.0),
        site("Intel Research, Berkeley", UsWest, 37.870, -122.268, 2, 0.0),
        site("Stanford, Palo Alto", UsWest, 37.428, -122.170, 3, 0.0),
        site("UCSF, San Francisco", UsWest, 37.763, -122.458, 2, 0.0),
        site("UC Santa Cruz", UsWest, 36.991, -122.060, 1, 0.0),
        site("UC Davis", UsWest, 38.538, -121.762, 2, 0.0),
        site("UCLA, Los Angeles", UsWest, 34.069, -118.445, 3, 0.0),
        site("USC, Los Angeles", UsWest, 34.022, -118.285, 2, 0.0),
        site("Caltech, Pasadena", UsWest, 34.138, -118.125, 2, 0.0),
        site("UC Irvine", UsWest, 33.640, -117.844, 2, 0.0),
        site("UCSD, San Diego", UsWest, 32.880, -117.234, 3, 0.0),
        site("UC Santa Barbara", UsWest, 34.414, -119.849, 2, 0.0),
        site("U Washington, Seattle", UsWest, 47.655, -122.303, 3, 0.0),
        site("Portland State, Portland", UsWest, 45.512, -122.685, 2, 0.0),
        site("U Oregon, Eugene", UsWest, 44.045, -123.072, 1, 0.0),
        site("U Utah, Salt Lake City", UsWest, 40.763, -111.836, 2, 0.0),
        site("U Arizona, Tucson", UsWest, 32.232, -110.951, 2, 0.0),
        site("U Colorado, Boulder", UsWest, 40.007, -105.266, 2, 0.0),
        site(
            "U New Mexico, Albuquerque",
            UsWest,
            35.084,
            -106.619,
            2,
            0.0,
        ),
        // Europe.
        site("U Cambridge, UK", Europe, 52.205, 0.119, 3, 0.0),
        site("UCL, London", Europe, 51.525, -0.134, 2, 0.0),
        site("LIP6, Paris", Europe, 48.847, 2.357, 3, 0.0),
        site(
            "Vrije Universiteit, Amsterdam",
            Europe,
            52.334,
            4.866,
            2,
            0.0,
        ),
        site("TU Berlin", Europe, 52.512, 13.327, 2, 0.0),
        site("ETH Zurich", Europe, 47.376, 8.548, 2, 0.0),
        site("TU Munich", Europe, 48.149, 11.568, 2, 0.0),
        site("UC3M, Madrid", Europe, 40.332, -3.765, 2, 1.5),
        site("KTH, Stockholm", Europe, 59.350, 18.070, 2, 0.0),
        site("U Helsinki", Europe, 60.205, 24.963, 1, 1.0),
        site("La Sapienza, Rome", Europe, 41.903, 12.515, 2, 1.5),
        site("NTUA, Athens", Europe, 37.979, 23.783, 1, 14.0),
        // Asia.
        site("HKUST, Hong Kong", Asia, 22.336, 114.263, 1, 2.0),
        site("HKU, Hong Kong", Asia, 22.283, 114.137, 1, 2.0),
        site("NTU, Taipei", Asia, 25.017, 121.540, 1, 3.0),
        site("U Tokyo", Asia, 35.713, 139.762, 1, 2.0),
        site("Ateneo, Manila", Asia, 14.640, 121.078, 1, 8.0),
    ]
};

/// The index in [`SITES`] of the first site whose name contains `needle`.
pub fn site_index(needle: &str) -> Option<usize> {
    SITES.iter().position(|s| s.name.contains(needle))
}

/// Where one simulated node sits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NodePlace {
    /// Its site, an index into [`SITES`].
    pub site: usize,
    /// Latitude in degrees (the site's, nudged by up to a kilometre).
    pub lat: f64,
    /// Longitude in degrees (the site's, nudged by up to a kilometre).
    pub lon: f64,
    /// The node's one-way last-mile access delay, in milliseconds.
    pub access_ms: f64,
}

/// A set of nodes placed on the globe, with the RTT between any two.
#[derive(Clone, Debug, PartialEq)]
pub struct World {
    /// The nodes, by node index.
    pub nodes: Vec<NodePlace>,
    /// Seeds the per-pair jitter, so that different worlds jitter
    /// differently.
    pub pair_seed: u64,
}

/// Sites this close share a metropolitan router on their synthetic paths.
pub const METRO_KM: f64 = 150.0;
/// Light in fibre covers about 200 km per millisecond, one way.
const FIBRE_KM_PER_MS: f64 = 200.0;
/// The mean radius of the Earth.
const EARTH_RADIUS_KM: f64 = 6371.0;
/// Route inflation on long (transcontinental, transoceanic) paths.
const INFLATION_FAR: f64 = 1.35;
/// Extra route inflation on short paths, decaying with distance.
const INFLATION_NEAR_EXTRA: f64 = 0.45;
/// The distance over which the short-path inflation decays.
const INFLATION_DECAY_KM: f64 = 3000.0;
/// Router and queueing delay (round trip) between any two distinct sites.
const ROUTER_RTT_MS_MIN: f64 = 1.0;
/// Further router delay (round trip) on longer paths (more hops).
const ROUTER_RTT_MS_EXTRA: f64 = 2.0;
/// The distance over which the extra router delay saturates.
const ROUTER_DECAY_KM: f64 = 500.0;
/// RTT on a site's local network: nodes at one site are sub-millisecond
/// apart before their access delays.
const LAN_RTT_MS_MIN: f64 = 0.15;
/// Spread of the site-local RTT.
const LAN_RTT_MS_SPREAD: f64 = 0.35;
/// Per-pair jitter: up to this many milliseconds, plus a fraction of the path.
const JITTER_MS_BASE: f64 = 0.3;
/// Per-pair jitter as a fraction of the path's RTT.
const JITTER_FRACTION: f64 = 0.03;
/// Well-connected nodes' one-way access delay: `MIN + SPREAD * u³`, so
/// 0.2 to 3 ms with a median near 0.55 ms (most PlanetLab nodes sat on
/// university networks close to the backbone).
const ACCESS_MS_MIN: f64 = 0.2;
/// Spread of the well-connected access delay.
const ACCESS_MS_SPREAD: f64 = 2.8;
/// Fraction of nodes that are poorly connected.
const POORLY_CONNECTED_FRACTION: f64 = 0.03;
/// Poorly-connected nodes' one-way access delay: 10 to 40 ms.
const POOR_ACCESS_MS_MIN: f64 = 10.0;
/// Spread of the poorly-connected access delay.
const POOR_ACCESS_MS_SPREAD: f64 = 30.0;
/// How far (in degrees) a node may sit from its site's coordinates.
const PLACE_NUDGE_DEG: f64 = 0.01;

impl World {
    /// `n` nodes on the PlanetLab-like [`SITES`], in the testbed's regional
    /// proportions for any `n`: each site gets its weighted share, rounded
    /// up or down by systematic sampling from a random offset, so every
    /// region is within one node of its exact share. Node indices are
    /// shuffled, so no index range is geographically special. Access delays
    /// and per-pair jitter are drawn from `rng`. O(n).
    pub fn planetlab(n: usize, rng: &mut Rng) -> World {
        let total_weight: f64 = SITES.iter().map(|s| f64::from(s.weight)).sum();
        let mut sites = Vec::with_capacity(n);
        if n > 0 {
            // Systematic sampling: points offset, offset + step, ... over the
            // cumulative weights; each site receives the points in its span.
            let step = total_weight / n as f64;
            let mut point = rng.unit() * step;
            let mut cumulative = 0.0;
            for (index, s) in SITES.iter().enumerate() {
                cumulative += f64::from(s.weight);
                while point < cumulative && sites.len() < n {
                    sites.push(index);
                    point += step;
                }
            }
            // Floating-point rounding may leave the last point unplaced.
            while sites.len() < n {
                sites.push(SITES.len() - 1);
            }
        }
        rng.shuffle(&mut sites);
        let nodes = sites
            .into_iter()
            .map(|site| {
                let s = &SITES[site];
                let lat = s.lat + (rng.unit() * 2.0 - 1.0) * PLACE_NUDGE_DEG;
                let lon = s.lon + (rng.unit() * 2.0 - 1.0) * PLACE_NUDGE_DEG;
                let access_ms = if rng.chance(POORLY_CONNECTED_FRACTION) {
                    POOR_ACCESS_MS_MIN + POOR_ACCESS_MS_SPREAD * rng.unit()
                } else {
                    let u = rng.unit();
                    ACCESS_MS_MIN + ACCESS_MS_SPREAD * u * u * u
                };
                NodePlace {
                    site,
                    lat,
                    lon,
                    access_ms,
                }
            })
            .collect();
        World {
            nodes,
            pair_seed: rng.next_u64(),
        }
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True if the world has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The site `node` sits at. Panics if `node` is not a node of this world.
    pub fn site(&self, node: usize) -> &'static Site {
        &SITES[self.nodes[node].site]
    }

    /// The name of the site `node` sits at.
    pub fn site_name(&self, node: usize) -> &'static str {
        self.site(node).name
    }

    /// The region `node` sits in.
    pub fn region_of(&self, node: usize) -> Region {
        self.site(node).region
    }

    /// How many nodes sit in `region`.
    pub fn count_in(&self, region: Region) -> usize {
        self.nodes
            .iter()
            .filter(|p| SITES[p.site].region == region)
            .count()
    }

    /// The round-trip time between nodes `a` and `b`: the backbone RTT
    /// between their sites (or a sub-millisecond LAN hop if they share one),
    /// plus both nodes' access delays each way, plus a per-pair jitter from
    /// hashing the pair. Symmetric, zero for `a == b`, O(1), no per-pair
    /// storage. Panics if either is not a node of this world.
    pub fn rtt(&self, a: usize, b: usize) -> Duration {
        if a == b {
            return Duration::ZERO;
        }
        let (lo, hi) = if a < b { (a, b) } else { (b, a) };
        let (p, q) = (&self.nodes[lo], &self.nodes[hi]);
        let hash = pair_hash(self.pair_seed, lo, hi);
        let u_path = unit_from(hash);
        let u_jitter = unit_from(hash.rotate_left(32) ^ 0x9e37_79b9_7f4a_7c15);
        let path_ms = if p.site == q.site {
            LAN_RTT_MS_MIN + LAN_RTT_MS_SPREAD * u_path
        } else {
            let km = haversine_km(p.lat, p.lon, q.lat, q.lon);
            backbone_rtt_ms(km, &SITES[p.site], &SITES[q.site])
        };
        let access_ms = 2.0 * (p.access_ms + q.access_ms);
        let jitter_ms = u_jitter * (JITTER_MS_BASE + JITTER_FRACTION * path_ms);
        duration_from_ms(path_ms + access_ms + jitter_ms)
    }

    /// The one-way delay between `a` and `b`: half the [`rtt`](World::rtt).
    pub fn one_way(&self, a: usize, b: usize) -> Duration {
        Duration::from_micros(self.rtt(a, b).as_micros() / 2)
    }

    /// A lower bound on the one-way delay between any two distinct nodes:
    /// the shorter of a site's LAN and the routers between two sites, plus
    /// four of the least access delays, without jitter (which only adds),
    /// halved and rounded down: the lookahead of a run on several threads
    /// (`Links::min_one_way`; 474 µs).
    pub fn min_one_way() -> Duration {
        let rtt_ms = LAN_RTT_MS_MIN.min(ROUTER_RTT_MS_MIN) + 4.0 * ACCESS_MS_MIN;
        Duration::from_micros(((rtt_ms * 1000.0).floor() as u64).saturating_sub(1) / 2)
    }

    /// A synthetic router path and subnet for `node`, for its clustering
    /// hints (§4.4): the site's gateway (private at every other site, as
    /// many campuses are, so it is never a hint), the site's border router, a
    /// metropolitan router shared by sites within [`METRO_KM`], a regional
    /// router and a backbone router; and the site's public /24.
    pub fn hint_path(&self, node: usize) -> Option<HintPath> {
        let site = self.nodes.get(node)?.site;
        let s = &SITES[site];
        let metro = SITES
            .iter()
            .position(|t| haversine_km(s.lat, s.lon, t.lat, t.lon) <= METRO_KM)
            .unwrap_or(site);
        let region = Region::ALL.iter().position(|r| *r == s.region).unwrap_or(0);
        let v4 = |a: u8, b: u8, c: u8, d: u8| IpAddr::V4(Ipv4Addr::new(a, b, c, d));
        let (hi, lo) = ((site >> 8) as u8, site as u8);
        let gateway = if site % 2 == 0 {
            v4(10, hi, lo, 1)
        } else {
            v4(128, hi, lo, 1)
        };
        let routers = vec![
            gateway,
            v4(129, hi, lo, 254),
            v4(4, 1, metro as u8, 1),
            v4(4, 2, region as u8, 1),
            v4(4, 3, 0, 1),
        ];
        Some((routers, vec![(v4(130, hi, lo, 0), 24)]))
    }

    /// Whole sites to `p` lanes of a run on several threads
    /// ([`Links::lanes`]): each node's lane, and the least one-way delay
    /// between nodes of different lanes (the lookahead: the length of the
    /// run's windows). Sites nearer one another than a radius go to one
    /// lane together, so that two nodes in different lanes are at least a
    /// router path and that distance apart; the radius is the largest of
    /// [`LANE_RADII_KM`] at which no lane holds more than
    /// [`LANE_IMBALANCE_MAX`] times its share of the nodes. At 20,000
    /// nodes the lookahead is 1.5–2.2 ms on 2 to 16 lanes where
    /// [`World::min_one_way`] is 474 µs (benches/README.md, "Session 15,
    /// lanes by place").
    ///
    /// The bound, per pair of sites in different lanes: their backbone RTT
    /// at their centres' distance less twice the farthest a node is nudged
    /// from its site (the backbone RTT grows with distance), plus twice
    /// each site's least access delay; halved and rounded down as
    /// [`World::min_one_way`] is. Jitter only adds.
    pub fn site_lanes(&self, p: usize) -> (Vec<u16>, Duration) {
        let p = p.clamp(1, usize::from(u16::MAX));
        let mut per_site = vec![0usize; SITES.len()];
        let mut access = vec![f64::INFINITY; SITES.len()];
        for n in &self.nodes {
            per_site[n.site] += 1;
            access[n.site] = access[n.site].min(n.access_ms);
        }
        let share = self.nodes.len().div_ceil(p) as f64;
        let mut lane = Vec::new();
        for &radius_km in &LANE_RADII_KM {
            let (l, largest) = pack_sites(&per_site, p, radius_km);
            lane = l;
            if largest as f64 <= LANE_IMBALANCE_MAX * share {
                break;
            }
        }
        // With no pair of lanes holding nodes, nothing crosses: any
        // lookahead holds; a second keeps the windows' arithmetic small.
        let mut least_us: u64 = 1_000_000;
        let used: Vec<usize> = (0..SITES.len()).filter(|&s| per_site[s] > 0).collect();
        for (k, &s) in used.iter().enumerate() {
            for &t in &used[k + 1..] {
                if lane[s] == lane[t] {
                    continue;
                }
                let (a, b) = (&SITES[s], &SITES[t]);
                let km = (haversine_km(a.lat, a.lon, b.lat, b.lon) - 2.0 * nudge_km_max()).max(0.0);
                let rtt_ms = backbone_rtt_ms(km, a, b) + 2.0 * (access[s] + access[t]);
                least_us = least_us.min(((rtt_ms * 1000.0).floor() as u64).saturating_sub(1) / 2);
            }
        }
        let lanes = self.nodes.iter().map(|n| lane[n.site]).collect();
        (
            lanes,
            Duration::from_micros(least_us).max(World::min_one_way()),
        )
    }

    /// The backbone RTT between two sites (indices into [`SITES`]): fibre
    /// distance with route inflation, router delay and the sites' detours,
    /// without any node's access delay or jitter. Zero for a site and
    /// itself. Panics if either is not an index into [`SITES`].
    pub fn site_rtt(a: usize, b: usize) -> Duration {
        if a == b {
            return Duration::ZERO;
        }
        let (s, t) = (&SITES[a], &SITES[b]);
        duration_from_ms(backbone_rtt_ms(
            haversine_km(s.lat, s.lon, t.lat, t.lon),
            s,
            t,
        ))
    }
}

impl Links for World {
    fn one_way(&self, a: usize, b: usize) -> Duration {
        World::one_way(self, a, b)
    }

    fn min_one_way(&self) -> Duration {
        World::min_one_way()
    }

    fn lanes(&self, p: usize) -> Option<(Vec<u16>, Duration)> {
        Some(self.site_lanes(p))
    }

    fn hint_path(&self, node: usize) -> Option<HintPath> {
        World::hint_path(self, node)
    }
}

/// The great-circle distance between two points, in kilometres.
pub fn haversine_km(lat1: f64, lon1: f64, lat2: f64, lon2: f64) -> f64 {
    let (phi1, phi2) = (lat1.to_radians(), lat2.to_radians());
    let d_phi = (lat2 - lat1).to_radians();
    let d_lambda = (lon2 - lon1).to_radians();
    let h = (d_phi / 2.0).sin().powi(2) + phi1.cos() * phi2.cos() * (d_lambda / 2.0).sin().powi(2);
    2.0 * EARTH_RADIUS_KM * h.clamp(0.0, 1.0).sqrt().asin()
}

/// The radii within which sites share a lane ([`World::site_lanes`]), in
/// km, the largest tried first: 0 keeps only each site's nodes together.
pub const LANE_RADII_KM: [f64; 6] = [125.0, 100.0, 75.0, 50.0, 25.0, 0.0];

/// The most nodes a lane of [`World::site_lanes`] may hold, as a multiple of
/// an even share, before a smaller radius is tried.
pub const LANE_IMBALANCE_MAX: f64 = 1.1;

/// Sites to `p` lanes: sites within `radius_km` of one another (and so on,
/// transitively) form a group; groups by their number of nodes
/// (`per_site`), most first, each to the lane with the fewest nodes so far
/// (the lowest on a tie). Returns each site's lane and the most nodes a
/// lane holds.
fn pack_sites(per_site: &[usize], p: usize, radius_km: f64) -> (Vec<u16>, usize) {
    fn root(group: &mut [usize], mut s: usize) -> usize {
        while group[s] != s {
            group[s] = group[group[s]];
            s = group[s];
        }
        s
    }
    let mut group: Vec<usize> = (0..SITES.len()).collect();
    for (s, a) in SITES.iter().enumerate() {
        for (t, b) in SITES.iter().enumerate().skip(s + 1) {
            if haversine_km(a.lat, a.lon, b.lat, b.lon) <= radius_km {
                let (x, y) = (root(&mut group, s), root(&mut group, t));
                group[x.max(y)] = x.min(y);
            }
        }
    }
    let roots: Vec<usize> = (0..SITES.len()).map(|s| root(&mut group, s)).collect();
    let mut per_group = vec![0usize; SITES.len()];
    for s in 0..SITES.len() {
        per_group[roots[s]] += per_site[s];
    }
    let mut order: Vec<usize> = (0..SITES.len()).filter(|&g| per_group[g] > 0).collect();
    order.sort_by_key(|&g| (std::cmp::Reverse(per_group[g]), g));
    let mut load = vec![0usize; p];
    let mut group_lane = vec![0u16; SITES.len()];
    for &g in &order {
        let l = (0..p).min_by_key(|&l| (load[l], l)).unwrap_or(0);
        group_lane[g] = l as u16;
        load[l] += per_group[g];
    }
    let lanes = (0..SITES.len()).map(|s| group_lane[roots[s]]).collect();
    (lanes, load.into_iter().max().unwrap_or(0))
}

/// The farthest a node sits from its site's centre, in km: nudged by up to
/// [`PLACE_NUDGE_DEG`] in latitude and in longitude (a degree of longitude
/// is no longer than one of latitude), with 1 % to spare.
fn nudge_km_max() -> f64 {
    PLACE_NUDGE_DEG.to_radians() * EARTH_RADIUS_KM * std::f64::consts::SQRT_2 * 1.01
}

/// The backbone RTT over `km` of great-circle distance between distinct
/// sites `s` and `t`, in milliseconds.
fn backbone_rtt_ms(km: f64, s: &Site, t: &Site) -> f64 {
    let inflation = INFLATION_FAR + INFLATION_NEAR_EXTRA * (-km / INFLATION_DECAY_KM).exp();
    let propagation_ms = 2.0 * km * inflation / FIBRE_KM_PER_MS;
    let router_ms = ROUTER_RTT_MS_MIN + ROUTER_RTT_MS_EXTRA * (1.0 - (-km / ROUTER_DECAY_KM).exp());
    propagation_ms + router_ms + 2.0 * (s.detour_ms + t.detour_ms)
}

/// Milliseconds to a whole-microsecond [`Duration`] (negative or non-finite
/// values, which the model never produces, become zero).
fn duration_from_ms(ms: f64) -> Duration {
    let us = (ms * 1000.0).round();
    if us.is_finite() && us > 0.0 {
        Duration::from_micros(us as u64)
    } else {
        Duration::ZERO
    }
}

/// A well-mixed 64-bit hash of an unordered pair (`lo < hi`).
fn pair_hash(seed: u64, lo: usize, hi: usize) -> u64 {
    let mut x =
        seed ^ (lo as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (hi as u64).rotate_left(29);
    x = (x ^ (x >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    x = (x ^ (x >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// The top 53 bits of `x` as a float in `[0, 1)`.
fn unit_from(x: u64) -> f64 {
    (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site_of(name: &str) -> usize {
        match site_index(name) {
            Some(i) => i,
            None => panic!("no site named {name}"),
        }
    }

    /// Backbone RTT between the named sites, in milliseconds.
    fn site_ms(a: &str, b: &str) -> f64 {
        World::site_rtt(site_of(a), site_of(b)).as_millis_f64()
    }

    /// The median RTT between nodes at the two named sites in a large world:
    /// what a typical node pair sees, access delays and jitter included.
    fn typical_ms(world: &World, a: &str, b: &str) -> f64 {
        let (sa, sb) = (site_of(a), site_of(b));
        let at = |s: usize| -> Vec<usize> {
            (0..world.len())
                .filter(|&i| world.nodes[i].site == s)
                .collect()
        };
        let (xs, ys) = (at(sa), at(sb));
        let mut rtts: Vec<f64> = xs
            .iter()
            .flat_map(|&x| ys.iter().map(move |&y| (x, y)))
            .filter(|(x, y)| x != y)
            .map(|(x, y)| world.rtt(x, y).as_millis_f64())
            .collect();
        assert!(!rtts.is_empty(), "no nodes at {a} / {b}");
        rtts.sort_by(f64::total_cmp);
        rtts[rtts.len() / 2]
    }

    fn big_world() -> World {
        World::planetlab(2000, &mut Rng::new(2004))
    }

    fn check(world: &World, a: &str, b: &str, lo: f64, hi: f64) {
        let backbone = site_ms(a, b);
        let typical = typical_ms(world, a, b);
        println!("{a} – {b}: backbone {backbone:.1} ms, typical node pair {typical:.1} ms");
        assert!(
            (lo..=hi).contains(&typical),
            "{a} – {b}: typical RTT {typical:.1} ms outside {lo}..{hi}"
        );
    }

    #[test]
    fn site_table_weights_match_the_166_node_testbed() {
        let by = |r: Region| -> u32 {
            SITES
                .iter()
                .filter(|s| s.region == r)
                .map(|s| s.weight)
                .sum()
        };
        let east = by(Region::UsEast) + by(Region::UsCentral);
        println!(
            "east+central {east}, west {}, Europe {}, Asia {}",
            by(Region::UsWest),
            by(Region::Europe),
            by(Region::Asia)
        );
        assert_eq!(SITES.iter().map(|s| s.weight).sum::<u32>(), 166);
        assert!((90..=100).contains(&east));
        assert!((38..=45).contains(&by(Region::UsWest)));
        assert!((20..=28).contains(&by(Region::Europe)));
        assert_eq!(by(Region::Asia), 5);
        // Grouped by region, so systematic sampling keeps regional shares.
        for w in SITES.windows(2) {
            assert!(
                w[0].region <= w[1].region,
                "{} before {}",
                w[0].name,
                w[1].name
            );
        }
    }

    #[test]
    fn boston_nyc_rtt_is_about_ten_ms() {
        check(&big_world(), "MIT", "NYU", 8.0, 12.0);
    }

    #[test]
    fn nyc_berkeley_rtt_matches_iptps_section_3() {
        // IPTPS 2003 measured 68 ms between New York and Berkeley.
        check(&big_world(), "NYU", "UC Berkeley", 65.0, 80.0);
    }

    #[test]
    fn amsterdam_athens_rtt_matches_iptps_section_3() {
        // IPTPS 2003 measured 72 ms between Amsterdam and Athens.
        check(&big_world(), "Amsterdam", "Athens", 60.0, 75.0);
    }

    #[test]
    fn berkeley_ucla_rtt_is_within_california_range() {
        check(&big_world(), "UC Berkeley", "UCLA", 10.0, 20.0);
    }

    #[test]
    fn us_east_europe_rtts_are_transatlantic() {
        let w = big_world();
        check(&w, "NYU", "UCL, London", 80.0, 110.0);
        check(&w, "MIT", "Paris", 80.0, 110.0);
        check(&w, "Princeton", "Cambridge, UK", 80.0, 110.0);
        check(&w, "U Maryland", "Amsterdam", 80.0, 110.0);
    }

    #[test]
    fn us_asia_rtts_are_transpacific() {
        let w = big_world();
        check(&w, "UC Berkeley", "Tokyo", 120.0, 200.0);
        check(&w, "U Washington", "HKUST", 120.0, 200.0);
        check(&w, "UCLA", "Taipei", 120.0, 200.0);
        check(&w, "NYU", "HKU", 120.0, 200.0);
    }

    #[test]
    fn sixty_ms_splits_us_east_us_west_and_europe_as_in_fig_7() {
        // Level-1 clusters of Fig. 7: pairs inside one are under 60 ms,
        // pairs across are over it.
        let w = big_world();
        for (a, b) in [
            ("MIT", "Georgia Tech"),
            ("Princeton", "U Chicago"),
            ("UC Berkeley", "U Washington"),
            ("UCSD", "U Utah"),
            ("Cambridge, UK", "KTH"),
            ("LIP6", "La Sapienza"),
        ] {
            let ms = typical_ms(&w, a, b);
            println!("{a} – {b}: {ms:.1} ms (same level-1 cluster)");
            assert!(ms < 60.0, "{a} – {b}: {ms:.1} ms");
        }
        for (a, b) in [
            ("MIT", "UC Berkeley"),
            ("Princeton", "Stanford"),
            ("Duke", "U Washington"),
            ("NYU", "UCL, London"),
            ("UC Berkeley", "LIP6"),
        ] {
            let ms = typical_ms(&w, a, b);
            println!("{a} – {b}: {ms:.1} ms (different level-1 clusters)");
            assert!(ms > 60.0, "{a} – {b}: {ms:.1} ms");
        }
    }

    #[test]
    fn twenty_ms_gives_regional_clusters_as_in_fig_7() {
        let w = big_world();
        for (a, b) in [
            ("MIT", "Princeton"),
            ("NYU", "U Maryland"),
            ("Princeton", "Duke"),
            ("UC Berkeley", "UCLA"),
            ("Stanford", "UCSD"),
            ("U Washington", "Portland"),
            ("U Chicago", "UIUC"),
            ("UT Austin", "Rice"),
        ] {
            let ms = typical_ms(&w, a, b);
            println!("{a} – {b}: {ms:.1} ms (same level-2 cluster)");
            assert!(ms < 20.0, "{a} – {b}: {ms:.1} ms");
        }
        for (a, b) in [
            ("MIT", "U Chicago"),
            ("UC Berkeley", "U Washington"),
            ("Princeton", "Georgia Tech"),
            ("UCLA", "U Utah"),
            ("U Cambridge", "La Sapienza"),
        ] {
            let ms = typical_ms(&w, a, b);
            println!("{a} – {b}: {ms:.1} ms (different level-2 clusters)");
            assert!(ms > 20.0, "{a} – {b}: {ms:.1} ms");
        }
    }

    #[test]
    fn co_located_nodes_are_a_lan_hop_apart_plus_access() {
        let w = big_world();
        let mut checked = 0;
        for a in 0..200 {
            for b in (a + 1)..200 {
                if w.nodes[a].site == w.nodes[b].site {
                    let access = 2.0 * (w.nodes[a].access_ms + w.nodes[b].access_ms);
                    let lan = w.rtt(a, b).as_millis_f64() - access;
                    assert!((0.0..1.0).contains(&lan), "LAN part {lan} ms");
                    checked += 1;
                }
            }
        }
        assert!(checked > 0);
    }

    /// The lookahead of a run on several threads must not exceed any
    /// link's delay, or a datagram could arrive inside the window it was
    /// sent in, on a lane that has run past it.
    #[test]
    fn no_one_way_delay_is_under_the_bound() {
        let mut rng = Rng::new(5);
        let w = World::planetlab(3000, &mut rng);
        let bound = World::min_one_way();
        assert!(bound >= Duration::from_micros(400), "{bound:?}");
        let mut least = Duration::from_secs(1);
        for a in 0..w.len() {
            for b in (a + 1..w.len()).step_by(7) {
                least = least.min(w.one_way(a, b));
            }
        }
        assert!(least >= bound, "{least:?} < {bound:?}");
        assert!(least < bound + Duration::from_micros(200), "{least:?}");
    }

    /// Issue 27: with whole sites in lanes (`World::site_lanes`), no two
    /// nodes in different lanes are nearer than the lanes' lookahead (or a
    /// datagram between lanes would arrive inside the window it was sent
    /// in), the lookahead is above `World::min_one_way` (the windows are
    /// longer) and close to the nearest pair, and the lanes are even.
    #[test]
    fn no_delay_between_site_lanes_is_under_their_lookahead() {
        for seed in 1..=4 {
            let w = World::planetlab(2000, &mut Rng::new(seed));
            let cuts: Vec<(usize, Vec<u16>, Duration)> = [2, 3, 4, 8, 16]
                .into_iter()
                .map(|p| {
                    let (lanes, lookahead) = w.site_lanes(p);
                    (p, lanes, lookahead)
                })
                .collect();
            let mut least = vec![Duration::from_secs(1); cuts.len()];
            for a in 0..w.len() {
                for b in a + 1..w.len() {
                    let d = w.one_way(a, b);
                    for (k, (_, lanes, _)) in cuts.iter().enumerate() {
                        if lanes[a] != lanes[b] {
                            least[k] = least[k].min(d);
                        }
                    }
                }
            }
            for (k, (p, lanes, lookahead)) in cuts.iter().enumerate() {
                assert!(
                    least[k] >= *lookahead,
                    "seed {seed}, {p} lanes: {:?} < {lookahead:?}",
                    least[k]
                );
                assert!(
                    *lookahead >= Duration::from_micros(800),
                    "seed {seed}, {p} lanes: {lookahead:?}"
                );
                assert!(
                    least[k] < *lookahead + Duration::from_micros(300),
                    "seed {seed}, {p} lanes: {:?} against {lookahead:?}",
                    least[k]
                );
                let mut count = vec![0usize; *p];
                for &l in lanes {
                    count[usize::from(l)] += 1;
                }
                // Even within LANE_IMBALANCE_MAX, or else (radius 0) within
                // a site's nodes: at most 3 of 166 shares of them.
                let hi = *count.iter().max().unwrap();
                assert!(
                    hi as f64 <= LANE_IMBALANCE_MAX * 2000f64 / *p as f64 + 1.0
                        || hi <= 2000 / p + 2000 * 3 / 166,
                    "seed {seed}, {p} lanes: {count:?}"
                );
            }
        }
    }

    #[test]
    fn rtt_is_symmetric_and_one_way_is_half() {
        let w = World::planetlab(166, &mut Rng::new(1));
        for a in 0..w.len() {
            assert_eq!(w.rtt(a, a), Duration::ZERO);
            for b in 0..w.len() {
                assert_eq!(w.rtt(a, b), w.rtt(b, a));
                assert_eq!(w.one_way(a, b).as_micros(), w.rtt(a, b).as_micros() / 2);
                assert_eq!(Links::one_way(&w, a, b), w.one_way(a, b));
            }
        }
    }

    #[test]
    fn same_seed_same_world() {
        let a = World::planetlab(166, &mut Rng::new(42));
        let b = World::planetlab(166, &mut Rng::new(42));
        let c = World::planetlab(166, &mut Rng::new(43));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.rtt(3, 99), b.rtt(3, 99));
    }

    #[test]
    fn a_166_node_world_has_the_papers_regional_proportions() {
        for seed in 0..20 {
            let w = World::planetlab(166, &mut Rng::new(seed));
            assert_eq!(w.len(), 166);
            let east = w.count_in(Region::UsEast) + w.count_in(Region::UsCentral);
            let west = w.count_in(Region::UsWest);
            let europe = w.count_in(Region::Europe);
            let asia = w.count_in(Region::Asia);
            if seed == 0 {
                println!(
                    "166 nodes: east+central {east}, west {west}, Europe {europe}, Asia {asia}"
                );
            }
            assert!((70..=100).contains(&east), "east {east}");
            assert!((35..=50).contains(&west), "west {west}");
            assert!((15..=30).contains(&europe), "Europe {europe}");
            assert!(asia >= 3, "Asia {asia}");
            // PlanetLab sites host several nodes each.
            let mut per_site = [0usize; SITES.len()];
            for p in &w.nodes {
                per_site[p.site] += 1;
            }
            assert!(per_site.iter().all(|&c| c <= 3));
        }
    }

    #[test]
    fn proportions_hold_for_small_and_large_worlds() {
        for n in [0usize, 1, 10, 50, 500, 10_000] {
            let w = World::planetlab(n, &mut Rng::new(n as u64));
            assert_eq!(w.len(), n);
            let share = |weight: f64| weight / 166.0 * n as f64;
            for r in Region::ALL {
                let weight: u32 = SITES
                    .iter()
                    .filter(|s| s.region == r)
                    .map(|s| s.weight)
                    .sum();
                let got = w.count_in(r) as f64;
                assert!(
                    (got - share(f64::from(weight))).abs() <= 1.0,
                    "n {n}, {}: {got} vs {}",
                    r.name(),
                    share(f64::from(weight))
                );
            }
        }
    }

    #[test]
    fn ten_thousand_nodes_build_fast_and_rtt_is_constant_time() {
        let w = World::planetlab(10_000, &mut Rng::new(7));
        assert_eq!(w.len(), 10_000);
        // One small record per node, nothing per pair.
        assert_eq!(w.nodes.capacity(), 10_000);
        let mut sum = 0u64;
        let mut r = Rng::new(8);
        for _ in 0..100_000 {
            let a = r.below(10_000) as usize;
            let b = r.below(10_000) as usize;
            sum = sum.wrapping_add(w.rtt(a, b).as_micros());
        }
        assert!(sum > 0);
        let poor = w.nodes.iter().filter(|p| p.access_ms >= 10.0).count();
        assert!((150..=450).contains(&poor), "{poor} poorly connected");
    }
}
