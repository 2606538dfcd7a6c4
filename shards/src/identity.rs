//! The node's identity on disk and its network (issue 22; SECURITY.md,
//! "Threat model"): the long-term Ed25519 node key in the state directory
//! (created on first start, mode 0600, reused after), the network's
//! admission keys and this node's certificate, resolved once before the
//! executors start into a [`Trust`] every core reads.
//!
//! Files are one line of hex each (a secret key: 64 hex digits; a
//! certificate: 128), with `#` comments; a network key file (`coral
//! network init`) holds `secret = <hex>` and `public = <hex>` lines.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use coral::identity::{
    Certificate, KeyPair, LocalIdentity, Membership, PublicKey, Verifier, SECRET_KEY_BYTES,
};

use crate::config::{Network, NodeConfig};

/// The node key's file name in the state directory.
pub const NODE_KEY_FILE: &str = "node.key";

/// The node's identity and the network it takes part in.
#[derive(Clone, Debug)]
pub struct Trust {
    /// This node's key and certificate.
    pub identity: LocalIdentity,
    /// Which nodes it admits.
    pub membership: Membership,
    /// Where its key is kept.
    pub key_path: PathBuf,
    /// Whether the key was created by this start.
    pub created: bool,
}

impl Trust {
    /// Loads (or, on first start, creates) the node key in the state
    /// directory and resolves the network: with none configured, the node
    /// forms its own (it admits itself only); `open` admits any key; a list
    /// of admission keys admits the nodes they certified, and this node
    /// needs a certificate from one of them (a certificate file, or the
    /// network's secret key for labs and tests).
    pub fn load(config: &NodeConfig) -> Result<Trust, String> {
        let dir = config.state_dir();
        let (key, key_path, created) = load_or_create_node_key(&dir)?;
        let public = key.public();
        // A network key alone names its network (`network_key` in the file
        // with no `network`, as `--network-key` does).
        let network = match (&config.network, &config.network_key) {
            (Network::Own, Some(_)) => Network::Keys(Vec::new()),
            (n, _) => n.clone(),
        };
        if network == Network::Own && config.network_certificate.is_some() {
            return Err(
                "network_certificate is set, but network names no admission keys: set network \
                 to the network's public key"
                    .into(),
            );
        }
        let (cert, membership) = match &network {
            Network::Open => (Certificate::NONE, Membership::Open),
            Network::Own => {
                let cert = key.certify(&public);
                (cert, Membership::Admitted([public].into_iter().collect()))
            }
            Network::Keys(keys) => {
                let mut keys = keys.clone();
                let cert = if let Some(path) = &config.network_key {
                    let net = read_network_key(path)?;
                    if !keys.contains(&net.public()) {
                        keys.push(net.public());
                    }
                    net.certify(&public)
                } else if let Some(path) = &config.network_certificate {
                    read_certificate(path)?
                } else {
                    return Err(format!(
                        "network names admission keys, but this node has no certificate: run \
                         `coral network admit {}` where the network key is kept, and set \
                         network_certificate (or --network-certificate) to the file it writes",
                        public.to_hex()
                    ));
                };
                let membership = Membership::Admitted(keys.into_iter().collect());
                if !membership.admits(&public, &cert) {
                    return Err(format!(
                        "the certificate does not admit this node's key {} under the network's \
                         admission keys: it was issued for another key or another network",
                        public.to_hex()
                    ));
                }
                (cert, membership)
            }
        };
        Ok(Trust {
            identity: LocalIdentity::new(key, cert),
            membership,
            key_path,
            created,
        })
    }

    /// A verifier of this node's membership, its verdict caches keyed by a
    /// fresh secret (from the OS; a fixed one if it cannot be read, which
    /// costs only the caches' resistance to crafted collisions).
    pub fn verifier(&self) -> Verifier {
        let secret = random_secret().unwrap_or([0x5a; SECRET_KEY_BYTES]);
        Verifier::new(self.membership.clone(), &secret)
    }

    /// The network in words, for the start-up log and the status page.
    pub fn describe(&self) -> String {
        match &self.membership {
            Membership::Open => "open (any key; see SECURITY.md)".into(),
            Membership::Admitted(keys) if keys.as_slice() == [self.identity.public()] => {
                "its own (admits itself only)".into()
            }
            Membership::Admitted(keys) => format!(
                "admission keys {}",
                keys.iter()
                    .map(PublicKey::to_hex)
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        }
    }
}

/// The node key in `dir`: read, or created (with the directory, mode 0700)
/// with 32 bytes from the OS, written with mode 0600. Returns the key, its
/// path and whether it was created.
pub fn load_or_create_node_key(dir: &Path) -> Result<(KeyPair, PathBuf, bool), String> {
    let path = dir.join(NODE_KEY_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let mode = std::fs::metadata(&path)
                .map(|m| m.permissions().mode() & 0o777)
                .unwrap_or(0);
            if mode & 0o077 != 0 {
                return Err(format!(
                    "{} is readable by others (mode {mode:o}): the node key is a secret; \
                     chmod 600 it",
                    path.display()
                ));
            }
            let secret = parse_secret(&text)
                .ok_or_else(|| format!("{}: not a node key (64 hex digits)", path.display()))?;
            Ok((KeyPair::from_secret(&secret), path, false))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("cannot create the state directory {}: {e}", dir.display()))?;
            let key = KeyPair::from_secret(&random_secret()?);
            write_secret_file(
                &path,
                &format!(
                    "# coral node key (Ed25519 secret): keep it secret; it is this node's identity\n{}\n",
                    coral::identity::to_hex(&key.secret())
                ),
            )?;
            Ok((key, path, true))
        }
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// Writes a new network admission key to `path` (mode 0600; refuses to
/// overwrite) and returns it.
pub fn init_network(path: &Path) -> Result<KeyPair, String> {
    let key = KeyPair::from_secret(&random_secret()?);
    write_secret_file(
        path,
        &format!(
            "# coral network admission key: the secret admits nodes (`coral network admit`);\n\
             # keep it off the nodes. Give nodes the public key (network = \"<public>\").\n\
             secret = {}\npublic = {}\n",
            coral::identity::to_hex(&key.secret()),
            key.public().to_hex()
        ),
    )?;
    Ok(key)
}

/// Reads a network admission key file written by [`init_network`], or a
/// node key file: a node with no network is a network of its own whose
/// admission key is its node key, so a lab node given another node's key
/// file joins that node's network.
pub fn read_network_key(path: &Path) -> Result<KeyPair, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the network key {}: {e}", path.display()))?;
    let secret = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("secret"))
        .and_then(|rest| rest.trim().strip_prefix('='))
        .and_then(parse_secret)
        .or_else(|| parse_secret(&text))
        .ok_or_else(|| {
            format!(
                "{}: no `secret = <64 hex digits>` line (a file from `coral network init`) \
                 nor a node key",
                path.display()
            )
        })?;
    Ok(KeyPair::from_secret(&secret))
}

/// Reads a certificate file (128 hex digits, `#` comments allowed).
pub fn read_certificate(path: &Path) -> Result<Certificate, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the certificate {}: {e}", path.display()))?;
    content_lines(&text)
        .and_then(Certificate::from_hex)
        .ok_or_else(|| format!("{}: not a certificate (128 hex digits)", path.display()))
}

/// The one non-comment line of a key or certificate file.
fn content_lines(text: &str) -> Option<&str> {
    let mut lines = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'));
    let first = lines.next()?;
    lines.next().is_none().then_some(first)
}

fn parse_secret(text: &str) -> Option<[u8; SECRET_KEY_BYTES]> {
    let line = content_lines(text).unwrap_or(text.trim());
    let mut b = [0u8; SECRET_KEY_BYTES];
    coral::identity::from_hex(line.trim(), &mut b)?;
    Some(b)
}

fn random_secret() -> Result<[u8; SECRET_KEY_BYTES], String> {
    let mut b = [0u8; SECRET_KEY_BYTES];
    let mut f = std::fs::File::open("/dev/urandom")
        .map_err(|e| format!("cannot open /dev/urandom: {e}"))?;
    std::io::Read::read_exact(&mut f, &mut b)
        .map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
    Ok(b)
}

/// Creates `path` with mode 0600 (never over an existing file) and writes
/// `text`, synced.
fn write_secret_file(path: &Path, text: &str) -> Result<(), String> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// `coral node`'s flags for its identity and network.
#[derive(clap::Args, Debug, Default)]
pub struct TrustArgs {
    /// Where the node keeps its identity key (default:
    /// coral-state/<DSHT IP>-<port>; a packaged node: /var/lib/coral).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// The network to take part in: "open" (any node), or its admission
    /// public keys, comma-separated (default: the node's own network, which
    /// admits itself only).
    #[arg(long, value_name = "open|KEYS")]
    pub network: Option<String>,
    /// This node's certificate file (from `coral network admit`).
    #[arg(long, value_name = "FILE")]
    pub network_certificate: Option<PathBuf>,
    /// LABS AND TESTS ONLY: the network's secret key file (from `coral
    /// network init`); the node certifies itself with it, and takes part in
    /// that network. Production nodes get a certificate instead.
    #[arg(long, value_name = "FILE")]
    pub network_key: Option<PathBuf>,
}

impl TrustArgs {
    /// Overrides the configuration's keys with the flags given.
    pub fn apply(self, cfg: &mut NodeConfig) -> Result<(), String> {
        if let Some(d) = self.state_dir {
            cfg.state_dir = Some(d);
        }
        if let Some(n) = &self.network {
            cfg.network = crate::config::Network::parse(n)?;
        }
        if let Some(c) = self.network_certificate {
            cfg.network_certificate = Some(c);
        }
        if let Some(k) = self.network_key {
            if cfg.network == Network::Own {
                // A network key alone names its network.
                cfg.network = Network::Keys(Vec::new());
            }
            cfg.network_key = Some(k);
        }
        Ok(())
    }
}

/// `coral network`: admission keys and certificates.
#[derive(clap::Subcommand, Debug)]
pub enum NetworkCommand {
    /// Write a new network admission key (secret and public) to FILE (mode
    /// 0600, never over an existing file) and print its public key: give
    /// nodes `network = "<public key>"`.
    Init {
        /// The key file to write.
        #[arg(long, default_value = "network.key")]
        out: PathBuf,
    },
    /// Sign a node's certificate: admits the node whose public key is
    /// NODE_PUBKEY (`coral network node-key` prints it) to the network of
    /// --key. Prints the certificate, or writes it to --out.
    Admit {
        /// The node's public key (64 hex digits).
        node_pubkey: String,
        /// The network's key file (from `coral network init`).
        #[arg(long, default_value = "network.key")]
        key: PathBuf,
        /// Write the certificate to this file (mode 0600) instead of printing it.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Print this node's public key (created in the state directory if it
    /// is not there yet).
    NodeKey {
        /// The node's state directory.
        #[arg(long, value_name = "DIR")]
        state_dir: PathBuf,
    },
}

/// Runs a `coral network` command; what it prints on success.
pub fn run_network(cmd: NetworkCommand) -> Result<String, String> {
    match cmd {
        NetworkCommand::Init { out } => {
            let key = init_network(&out)?;
            Ok(format!(
                "wrote the network key to {} (keep it secret, off the nodes)
public key: {}",
                out.display(),
                key.public().to_hex()
            ))
        }
        NetworkCommand::Admit {
            node_pubkey,
            key,
            out,
        } => {
            let node = PublicKey::from_hex(&node_pubkey)
                .ok_or_else(|| format!("{node_pubkey:?} is not a public key (64 hex digits)"))?;
            let net = read_network_key(&key)?;
            let cert = net.certify(&node);
            match out {
                Some(path) => {
                    write_secret_file(
                        &path,
                        &format!(
                            "# coral node certificate: network {} admits node {}\n{}\n",
                            net.public().to_hex(),
                            node.to_hex(),
                            cert.to_hex()
                        ),
                    )?;
                    Ok(format!("wrote the certificate to {}", path.display()))
                }
                None => Ok(cert.to_hex()),
            }
        }
        NetworkCommand::NodeKey { state_dir } => {
            let (key, _, _) = load_or_create_node_key(&state_dir)?;
            Ok(key.public().to_hex())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tempdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("coral-identity-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn the_node_key_is_created_once_with_mode_0600_and_reused() {
        let dir = tempdir("key");
        let (k1, path, created) = load_or_create_node_key(&dir).unwrap();
        assert!(created);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (k2, _, created) = load_or_create_node_key(&dir).unwrap();
        assert!(!created);
        assert_eq!(k1.public(), k2.public());
        // A key others can read is refused.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(load_or_create_node_key(&dir).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_network_key_admits_nodes_through_certificate_files() {
        let dir = tempdir("net");
        std::fs::create_dir_all(&dir).unwrap();
        let net = init_network(&dir.join("network.key")).unwrap();
        assert!(
            init_network(&dir.join("network.key")).is_err(),
            "never overwritten"
        );
        let read = read_network_key(&dir.join("network.key")).unwrap();
        assert_eq!(read.public(), net.public());
        let node = KeyPair::from_secret(&[7; 32]);
        let cert = read.certify(&node.public());
        std::fs::write(dir.join("node.cert"), format!("# c\n{}\n", cert.to_hex())).unwrap();
        let back = read_certificate(&dir.join("node.cert")).unwrap();
        assert!(back.admits(&net.public(), &node.public()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
