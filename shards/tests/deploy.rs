//! The deployment files in `deploy/`, checked as a host runs them: the
//! systemd unit installed where `deploy/README.md`'s install lines put it
//! (in a mount namespace whose `/etc`, `/usr/local` and `/var` are
//! overlays: nothing reaches the host's) passes `systemd-analyze verify`,
//! and the node starts, serves and stops in the unit's sandbox reproduced
//! as far as a test can (user 65534, `/` as working directory, every mount
//! read-only but the unit's directories, the unit's capabilities and
//! limits, a network namespace of its own). The config, the unit, the
//! image and the DaemonSet name the same directories; the seccomp profile
//! allows io_uring; the DaemonSet uses host networking and the admin
//! probes. Needs root, util-linux (`unshare`, `setpriv`, `prlimit`,
//! `findmnt`) and systemd's `systemd-analyze` (`.ci/run` installs it).

mod common;

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{
    answers_http, curl, http_get, kdig, own_network, temp_dir, wait_until, web_root, Nginx, Proc,
    CORAL, START_WAIT,
};

fn deploy(name: &str) -> String {
    let p = format!("{}/../deploy/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// The repository's root (where the README's install lines run).
fn repo() -> String {
    format!("{}/..", env!("CARGO_MANIFEST_DIR"))
}

/// The values of `key=` in the unit (every line that sets it).
fn unit_values(unit: &str, key: &str) -> Vec<String> {
    unit.lines()
        .filter_map(|l| l.trim().strip_prefix(key)?.strip_prefix('='))
        .map(|v| v.trim().to_string())
        .collect()
}

/// The one value of `key=` in the unit.
fn unit_value(unit: &str, key: &str) -> String {
    let v = unit_values(unit, key);
    assert_eq!(v.len(), 1, "coral.service: {key}= {v:?}");
    v[0].clone()
}

/// The `install` lines of deploy/README.md's systemd section (its first
/// `sh` block), with the binary just built in place of
/// `target/release/coral`.
fn readme_install_lines() -> Vec<String> {
    let readme = deploy("README.md");
    let section = &readme[readme.find("## systemd").expect("a systemd section")..];
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a sh block in the systemd section");
    let lines: Vec<String> = block
        .lines()
        .filter(|l| l.starts_with("install "))
        .map(|l| {
            l.split(" #")
                .next()
                .unwrap()
                .trim()
                .replace("target/release/coral", CORAL)
        })
        .collect();
    assert!(!lines.is_empty(), "no install lines in:\n{block}");
    lines
}

/// A shell script (for `sh -c` in a private mount namespace) that mounts
/// overlays on `/etc`, `/usr/local` and `/var`, their upper layers in a
/// tmpfs mounted on `ovl` (so nothing it writes reaches the host), then
/// runs the README's install lines from the repository's root.
fn install_script(ovl: &Path) -> String {
    let mut s = format!(
        "set -eu\novl={ovl}\nmount -t tmpfs tmpfs \"$ovl\"\n\
         for d in etc usr/local var; do\n  n=$(echo \"$d\" | tr / _)\n  \
         mkdir -p \"$ovl/$n/up\" \"$ovl/$n/work\"\n  \
         mount -t overlay overlay -o \"lowerdir=/$d,upperdir=$ovl/$n/up,workdir=$ovl/$n/work\" \"/$d\"\n\
         done\ncd {repo}\n",
        ovl = ovl.display(),
        repo = repo(),
    );
    for l in readme_install_lines() {
        s.push_str(&l);
        s.push('\n');
    }
    s
}

/// Runs `script` in a private mount namespace: its output.
fn in_mount_namespace(script: &str) -> std::process::Output {
    Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", script])
        .output()
        .expect("unshare (util-linux)")
}

fn have_systemd_analyze() -> bool {
    Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok()
}

#[test]
fn systemd_unit_passes_systemd_analyze_verify_installed_as_the_readme_says() {
    let unit = deploy("coral.service");
    for needed in [
        "Type=notify",
        "AmbientCapabilities=CAP_NET_BIND_SERVICE",
        "CapabilityBoundingSet=CAP_NET_BIND_SERVICE",
        "LimitMEMLOCK=",
        "LimitNOFILE=",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "ProtectSystem=strict",
        "CacheDirectory=coral",
        "StateDirectory=coral",
    ] {
        assert!(unit.contains(needed), "coral.service lacks {needed}");
    }
    // A syscall filter would have to allow io_uring; this unit has none.
    assert!(
        !unit
            .lines()
            .any(|l| l.trim_start().starts_with("SystemCallFilter")),
        "a SystemCallFilter may deny io_uring_setup"
    );
    // Every file the unit names is one the README installs: the binary of
    // ExecStart= and ExecStartPre=, the config, the documentation, the unit.
    let installs = readme_install_lines().join("\n");
    let mut named: Vec<String> = Vec::new();
    for key in ["ExecStart", "ExecStartPre"] {
        for cmd in unit_values(&unit, key) {
            named.extend(
                cmd.split_whitespace()
                    .filter(|w| w.starts_with('/'))
                    .map(String::from),
            );
        }
    }
    for doc in unit_value(&unit, "Documentation").split_whitespace() {
        named.push(
            doc.strip_prefix("file://")
                .unwrap_or_else(|| panic!("Documentation={doc}: a file:// the README installs"))
                .to_string(),
        );
    }
    named.push("/etc/systemd/system/coral.service".into());
    for path in &named {
        assert!(
            installs.lines().any(|l| l.ends_with(&format!(" {path}"))),
            "coral.service names {path}, which deploy/README.md does not install:\n{installs}"
        );
    }
    if !have_systemd_analyze() {
        eprintln!("SKIPPED: systemd-analyze is not installed (Debian package systemd)");
        return;
    }
    let dir = temp_dir("unit");
    let ovl = dir.path().join("ovl");
    std::fs::create_dir(&ovl).unwrap();
    let script = format!(
        "{}for f in {}; do test -e \"$f\" || {{ echo \"not installed: $f\" >&2; exit 1; }}; done\n\
         systemd-analyze verify /etc/systemd/system/coral.service\n",
        install_script(&ovl),
        named.join(" ")
    );
    let before: Vec<bool> = named.iter().map(|p| Path::new(p).exists()).collect();
    let out = in_mount_namespace(&script);
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify of the installed unit: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Nothing reached the host.
    let after: Vec<bool> = named.iter().map(|p| Path::new(p).exists()).collect();
    assert_eq!(
        before, after,
        "the install escaped its mount namespace: {named:?}"
    );
}

/// The config's `[proxy] cache_dir`, the unit's `CacheDirectory=`, the
/// image's and the DaemonSet's directories are one: `/var/cache/coral`; the
/// state (`/var/lib/coral`) alike.
#[test]
fn config_unit_image_and_daemonset_name_the_same_directories() {
    let unit = deploy("coral.service");
    let cache = format!("/var/cache/{}", unit_value(&unit, "CacheDirectory"));
    let state = format!("/var/lib/{}", unit_value(&unit, "StateDirectory"));
    let toml_text = deploy("coral.toml");
    let cfg: toml::Table = toml::from_str(&toml_text).unwrap();
    let cache_dir = cfg["proxy"]["cache_dir"]
        .as_str()
        .expect("[proxy] cache_dir");
    assert!(Path::new(cache_dir).is_absolute(), "cache_dir {cache_dir}");
    assert_eq!(
        cache_dir, cache,
        "coral.toml's cache_dir and CacheDirectory="
    );
    assert!(
        toml_text.contains(&format!("state_dir: \"{state}\""))
            || cfg.get("state_dir").and_then(|v| v.as_str()) == Some(state.as_str()),
        "coral.toml names the state directory {state}"
    );
    let image = deploy("Containerfile");
    let ds = deploy("daemonset.yaml");
    assert!(
        image.contains(&format!("chown coral:coral {cache} {state}")),
        "Containerfile: {cache} and {state} owned by coral"
    );
    for dir in [&cache, &state] {
        assert!(
            image.contains(&format!(":{dir}")),
            "Containerfile: a volume on {dir}"
        );
        assert!(
            ds.contains(&format!("mountPath: {dir}}}")),
            "daemonset.yaml mounts {dir}"
        );
        assert!(
            ds.contains(&format!("path: {dir},")),
            "daemonset.yaml: hostPath {dir}"
        );
    }
    // The image's user is the DaemonSet's.
    assert!(image.contains("--uid 65532") && ds.contains("runAsUser: 65532"));
    assert!(image.contains("cargo build --release --locked"));
    // The README installs with Cargo.lock's versions.
    let readme = std::fs::read_to_string(format!("{}/README.md", repo())).unwrap();
    assert!(readme.contains("cargo install --locked --path shards"));
}

/// What a sandboxed start found.
struct Sandboxed {
    proc: Proc,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Sandboxed {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// `rlimit` value of a unit's `LimitX=` (`64M`, `1048576`), no higher than
/// this process's hard limit (raising it needs CAP_SYS_RESOURCE, which a
/// test machine's root may lack).
fn limit(unit_value: &str, resource: libc::__rlimit_resource_t) -> u64 {
    let (num, mult) = match unit_value.chars().last().unwrap() {
        'K' => (&unit_value[..unit_value.len() - 1], 1 << 10),
        'M' => (&unit_value[..unit_value.len() - 1], 1 << 20),
        'G' => (&unit_value[..unit_value.len() - 1], 1 << 30),
        _ => (unit_value, 1),
    };
    let want: u64 = num.parse::<u64>().unwrap() * mult;
    let mut cur = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes into `cur`, ours.
    assert_eq!(unsafe { libc::getrlimit(resource, &mut cur) }, 0);
    want.min(cur.rlim_max)
}

/// Starts the unit's `ExecStartPre=` and `ExecStart=` in its sandbox, as
/// far as a test reproduces it, with deploy/ installed as the README says
/// and then `edit` (shell) run: in a private mount namespace, every mount
/// read-only but the unit's Cache/State/LogsDirectory (owned by the user)
/// and a private /tmp; user and group 65534, no supplementary groups, the
/// unit's capabilities (ambient and bounding), no new privileges, its
/// UMask=, its LimitMEMLOCK= and LimitNOFILE= (capped at this process's
/// hard limits), `/` as working directory, `NOTIFY_SOCKET=notify`. The
/// calling thread's network namespace is the node's.
fn start_sandboxed(edit: &str, notify: &str) -> Sandboxed {
    let unit = deploy("coral.service");
    let dir = temp_dir("sandbox");
    let ovl = dir.path().join("ovl");
    std::fs::create_dir(&ovl).unwrap();
    let caps: Vec<String> = unit_value(&unit, "AmbientCapabilities")
        .split_whitespace()
        .map(|c| c.trim_start_matches("CAP_").to_ascii_lowercase())
        .collect();
    assert_eq!(
        unit_value(&unit, "CapabilityBoundingSet"),
        unit_value(&unit, "AmbientCapabilities")
    );
    let caps = format!("-all,+{}", caps.join(",+"));
    let run_as = format!(
        "prlimit --memlock={m}:{m} --nofile={n}:{n} setpriv --reuid=65534 --regid=65534 \
         --clear-groups {nnp} --inh-caps={caps} --ambient-caps={caps} --bounding-set={caps}",
        m = limit(&unit_value(&unit, "LimitMEMLOCK"), libc::RLIMIT_MEMLOCK),
        n = limit(&unit_value(&unit, "LimitNOFILE"), libc::RLIMIT_NOFILE),
        nnp = if unit_value(&unit, "NoNewPrivileges") == "yes" {
            "--no-new-privs"
        } else {
            ""
        },
    );
    let writable: Vec<String> = [
        ("CacheDirectory", "/var/cache"),
        ("StateDirectory", "/var/lib"),
        ("LogsDirectory", "/var/log"),
    ]
    .iter()
    .map(|(key, base)| format!("{base}/{}", unit_value(&unit, key)))
    .collect();
    assert_eq!(unit_value(&unit, "ProtectSystem"), "strict");
    assert_eq!(unit_value(&unit, "PrivateTmp"), "yes");
    assert!(unit_values(&unit, "WorkingDirectory").is_empty(), "/ then");
    let script = format!(
        "{install}{edit}\n\
         for d in {writable}; do\n  mkdir -p \"$d\"; chown 65534:65534 \"$d\"; chmod 755 \"$d\"\n  \
         mount --bind \"$d\" \"$d\"\ndone\n\
         findmnt -rn -o TARGET,OPTIONS | while read -r mp opts; do\n  \
         case \"$mp\" in /proc|/proc/*|/sys|/sys/*|/dev|/dev/*) continue;; esac\n  \
         case \" {writable} \" in *\" $mp \"*) continue;; esac\n  \
         case \",$opts,\" in *,ro,*) continue;; esac\n  \
         mount -o remount,bind,ro \"$mp\"\ndone\n\
         mount -t tmpfs -o mode=1777 tmpfs /tmp\n\
         cd /\numask {umask}\n\
         if {run_as} touch /coral-sandbox-probe 2>/dev/null; then echo 'sandbox: / is writable' >&2; exit 97; fi\n\
         for d in {writable}; do {run_as} touch \"$d/.probe\" && rm \"$d/.probe\" || exit 98; done\n\
         {run_as} {pre}\nexec {run_as} {start}\n",
        install = install_script(&ovl),
        writable = writable.join(" "),
        umask = unit_value(&unit, "UMask"),
        pre = unit_value(&unit, "ExecStartPre"),
        start = unit_value(&unit, "ExecStart"),
    );
    let log = dir.path().join("node.log");
    let proc = Proc::spawn(
        Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("NOTIFY_SOCKET", format!("@{notify}"))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap()),
        "unshare (util-linux)",
    );
    Sandboxed {
        proc,
        log,
        _dir: dir,
    }
}

/// The shipped config's addresses: admin, dns (its `dns`, else port 53 on
/// the public address), and where its HTTP proxy is reached (its `http`,
/// else port 8090 on the public address).
fn shipped_addresses() -> (SocketAddr, SocketAddr, SocketAddr, String) {
    let cfg: toml::Table = toml::from_str(&deploy("coral.toml")).unwrap();
    let addr = |k: &str| -> SocketAddr { cfg[k].as_str().unwrap().parse().unwrap() };
    let public = addr("public_addr");
    let http = match cfg.get("http") {
        Some(h) => {
            let h: SocketAddr = h.as_str().unwrap().parse().unwrap();
            if h.ip().is_unspecified() {
                SocketAddr::new(public.ip(), h.port())
            } else {
                h
            }
        }
        None => SocketAddr::new(public.ip(), 8090),
    };
    // No `dns` line: dnssrv follows the DSHT address, port 53 on a public
    // node (README, "Running a node for real").
    let dns = match cfg.get("dns") {
        Some(_) => addr("dns"),
        None => SocketAddr::new(public.ip(), 53),
    };
    let dns = if dns.ip().is_unspecified() {
        SocketAddr::new(public.ip(), dns.port())
    } else {
        dns
    };
    (addr("admin"), dns, http, public.ip().to_string())
}

/// A notification socket (abstract, in the test's network namespace).
fn notify_socket(tag: &str) -> (UnixDatagram, String) {
    let name = format!("coral-deploy-{tag}-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let sock = UnixDatagram::bind_addr(&addr).unwrap();
    (sock, name)
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("iproute2");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The pid's real uid (from /proc).
fn uid_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next().map(String::from))
        .unwrap_or_default()
}

#[test]
fn the_node_starts_serves_and_stops_in_the_units_sandbox() {
    if !have_systemd_analyze() {
        // Not needed here, but the host-like set-up is .ci/run's.
        eprintln!("note: systemd-analyze is not installed");
    }
    own_network();
    let (admin, dns, http, public_ip) = shipped_addresses();
    // The example's public address is this namespace's own.
    ip(&["addr", "add", &format!("{public_ip}/32"), "dev", "lo"]);
    // An origin (nginx on loopback), which the shipped config would refuse
    // as private: these two lines are the only change to it.
    let origin_dir = temp_dir("sandbox-origin");
    let hello = "cached in /var/cache/coral\n";
    let root = web_root(origin_dir.path(), &[("hello.txt", hello.as_bytes())]);
    let _nginx = Nginx::start(origin_dir.path(), "127.0.0.1:8080".parse().unwrap(), &root);
    let edit = "sed -i -e 's/^allow_private_origins = false/allow_private_origins = true/' \
                -e 's/^resolve = \\[\\]/resolve = [\"origin.test=127.0.0.1\"]/' /etc/coral/coral.toml\n\
                grep -q '^resolve = \\[\"origin.test' /etc/coral/coral.toml";
    let (notify, name) = notify_socket("up");
    let mut node = start_sandboxed(edit, &name);
    // Type=notify: READY=1 once every core serves.
    notify
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut buf = [0u8; 512];
    let ready = wait_until(START_WAIT, Duration::from_millis(1), || {
        if let Some(st) = node.proc.child().try_wait().unwrap() {
            panic!("exited ({st}) in the sandbox:\n{}", node.log());
        }
        match notify.recv(&mut buf) {
            Ok(n) => {
                let msg = String::from_utf8_lossy(&buf[..n]).to_string();
                if msg.lines().any(|l| l == "READY=1") {
                    Ok(msg)
                } else {
                    Err(format!("not ready: {msg}"))
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Err(format!("no READY=1:\n{}", node.log()))
            }
            Err(e) => panic!("notify socket: {e}"),
        }
    });
    assert!(ready.contains("READY=1"));
    let pid = node.proc.id();
    // It runs as the unit's user, in /, and not as root.
    assert_eq!(uid_of(pid), "65534", "{}", node.log());
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap(),
        Path::new("/")
    );
    // It serves: /readyz, DNS, HTTP.
    let (status, _, body) = http_get(admin, "/readyz");
    assert_eq!(status, 200, "{body}");
    let soa = kdig(dns, &["coralcdn.test", "SOA"]);
    assert!(soa.contains("status: NOERROR"), "{soa}");
    wait_until(START_WAIT, Duration::from_millis(50), || {
        answers_http(http)
            .then_some(())
            .ok_or_else(|| format!("no HTTP at {http}"))
    });
    // An object fetched through it is stored in the unit's cache
    // directory (seen through the node's own root), the user's files.
    let got = curl(
        &http.ip().to_string(),
        &format!(
            "http://origin.test.8080.coral.test:{}/hello.txt",
            http.port()
        ),
        &[],
    );
    assert_eq!(
        (got.status, got.body.as_slice()),
        (200, hello.as_bytes()),
        "{got:?}"
    );
    let cache = format!("/proc/{pid}/root/var/cache/coral");
    let entries = wait_until(START_WAIT, Duration::from_millis(50), || {
        let entries: Vec<_> = std::fs::read_dir(&cache)
            .map_err(|e| format!("{cache}: {e}"))?
            .map(|e| e.unwrap())
            .collect();
        if entries.is_empty() {
            Err(format!("nothing in /var/cache/coral:\n{}", node.log()))
        } else {
            Ok(entries)
        }
    });
    for e in &entries {
        use std::os::unix::fs::MetadataExt;
        assert_eq!(e.metadata().unwrap().uid(), 65534, "{:?}", e.path());
    }
    // SIGTERM (KillSignal=) stops it within TimeoutStopSec=, exit 0.
    let unit = deploy("coral.service");
    assert_eq!(unit_value(&unit, "KillSignal"), "SIGTERM");
    let stop: u64 = unit_value(&unit, "TimeoutStopSec").parse().unwrap();
    node.proc.signal(libc::SIGTERM);
    let st = node
        .proc
        .exit_within(Duration::from_secs(stop))
        .unwrap_or_else(|| panic!("still running {stop} s after SIGTERM:\n{}", node.log()));
    assert!(st.success(), "exit {st}:\n{}", node.log());
}

/// The sandbox is the host's: the shipped config without its `cache_dir`
/// (the node's default, `coral-cache/…` under `/`) cannot start there, as
/// the issue found on a host (exit 1, not a restart-proof 2).
#[test]
fn without_cache_dir_the_node_cannot_start_in_the_units_sandbox() {
    own_network();
    let (_, _, _, public_ip) = shipped_addresses();
    ip(&["addr", "add", &format!("{public_ip}/32"), "dev", "lo"]);
    let (_notify, name) = notify_socket("nocache");
    let mut node = start_sandboxed("sed -i '/^cache_dir = /d' /etc/coral/coral.toml", &name);
    let st = node
        .proc
        .exit_within(START_WAIT)
        .unwrap_or_else(|| panic!("started without a cache directory:\n{}", node.log()));
    assert_eq!(st.code(), Some(1), "{}", node.log());
    assert!(
        node.log().contains("cannot open the cache"),
        "{}",
        node.log()
    );
}

#[test]
fn seccomp_profile_allows_io_uring_and_denies_administration() {
    let v: serde_json::Value = serde_json::from_str(&deploy("seccomp-coral.json")).unwrap();
    let rules = v["syscalls"].as_array().unwrap();
    let action_of = |name: &str| -> String {
        rules
            .iter()
            .find(|r| r["names"].as_array().unwrap().iter().any(|n| n == name))
            .map_or(v["defaultAction"].as_str().unwrap().to_string(), |r| {
                r["action"].as_str().unwrap().to_string()
            })
    };
    for call in [
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "membarrier",
    ] {
        assert_eq!(action_of(call), "SCMP_ACT_ALLOW", "{call}");
    }
    for call in [
        "mount",
        "kexec_load",
        "init_module",
        "ptrace",
        "bpf",
        "unshare",
        "setns",
    ] {
        assert_eq!(action_of(call), "SCMP_ACT_ERRNO", "{call}");
    }
    let cf = deploy("Containerfile");
    assert!(cf.contains("seccomp-coral.json") && cf.contains("--network host"));
}

#[test]
fn daemonset_uses_host_networking_and_the_admin_probes() {
    let ds = deploy("daemonset.yaml");
    for needed in [
        "kind: DaemonSet",
        "hostNetwork: true",
        "--public-addr=$(HOST_IP):7000",
        "path: /livez",
        "path: /readyz",
        "localhostProfile: coral.json",
        "add: [NET_BIND_SERVICE]",
    ] {
        assert!(ds.contains(needed), "daemonset.yaml lacks {needed}");
    }
    let readme = deploy("README.md");
    for section in ["## systemd", "## Container image", "## Kubernetes"] {
        assert!(readme.contains(section), "deploy/README.md lacks {section}");
    }
}

#[test]
fn logrotate_snippet_signals_usr1_and_the_readme_shows_it_as_shipped() {
    let file = deploy("coral.logrotate");
    let body: String = file
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(
        body.contains("postrotate") && body.contains("--signal=USR1"),
        "{body}"
    );
    assert!(
        body.contains("nocreate"),
        "the node creates the new file itself"
    );
    let readme = deploy("README.md");
    assert!(
        readme.contains(&format!("```text\n{body}```")),
        "deploy/README.md should show coral.logrotate as shipped"
    );
    let unit = deploy("coral.service");
    assert!(
        unit.contains("LogsDirectory=coral"),
        "/var/log/coral must be writable"
    );
    let toml = deploy("coral.toml");
    assert!(toml.contains("access_log = \"off\""));
}

// ---- tuning/ ------------------------------------------------------------------------

fn tuning_path(name: &str) -> String {
    format!("{}/tuning/{name}", repo())
}

/// The `key = value` lines of tuning/sysctl.d/60-coral.conf.
fn tuning_sysctls() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(tuning_path("sysctl.d/60-coral.conf")).unwrap();
    text.lines()
        .map(|l| l.split('#').next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (k, v) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("60-coral.conf: not key = value: {l}"));
            (k.trim().to_string(), v.trim().to_string())
        })
        .collect()
}

/// Whether this process is in another network namespace than pid 1 (a
/// test run inside `unshare -n`): some net.core settings are the first
/// namespace's alone and are not seen from there.
fn in_other_netns() -> bool {
    std::fs::read_link("/proc/self/ns/net").ok() != std::fs::read_link("/proc/1/ns/net").ok()
}

/// Every line of the sysctl file names a setting this kernel has, with a
/// value of its form (numbers, as many as the kernel shows); procps's
/// `sysctl --dry-run -p` agrees. Nothing is applied.
#[test]
fn tuning_sysctl_file_names_settings_this_kernel_has() {
    let settings = tuning_sysctls();
    assert!(settings.len() >= 6, "{settings:?}");
    let mut all_seen = true;
    for (key, value) in &settings {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        let now = match std::fs::read_to_string(&path) {
            Ok(now) => now,
            Err(e) if e.kind() == ErrorKind::NotFound && in_other_netns() => {
                eprintln!("note: {key} is not seen from this network namespace");
                all_seen = false;
                continue;
            }
            Err(e) => panic!("60-coral.conf: {key}: {path}: {e}"),
        };
        let fields = |s: &str| -> Vec<u64> {
            s.split_whitespace()
                .map(|f| {
                    f.parse()
                        .unwrap_or_else(|_| panic!("{key} = {s}: not a number"))
                })
                .collect()
        };
        assert_eq!(
            fields(value).len(),
            fields(&now).len(),
            "{key} = {value}: the kernel has {now:?}"
        );
    }
    let help = Command::new("sysctl").arg("--help").output().unwrap();
    if all_seen && String::from_utf8_lossy(&help.stdout).contains("--dry-run") {
        let out = Command::new("sysctl")
            .args(["--dry-run", "-p", &tuning_path("sysctl.d/60-coral.conf")])
            .output()
            .unwrap();
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "sysctl --dry-run -p: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `tuning/check` reports every recommendation, exits 0 (and with
/// `--strict`, 1 exactly when a value differs), and reads a given node's
/// limits and CPUs.
#[test]
fn tuning_check_reports_this_hosts_values_against_every_recommendation() {
    let pid = std::process::id().to_string();
    let out = Command::new(tuning_path("check"))
        .args(["--pid", &pid, "--dev", "lo"])
        .output()
        .expect("tuning/check");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (key, value) in tuning_sysctls() {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(key.as_str()))
            .unwrap_or_else(|| panic!("tuning/check does not report {key}:\n{text}"));
        assert!(line.contains(&value), "{key}: recommended {value}: {line}");
        let Ok(now) = std::fs::read_to_string(format!("/proc/sys/{}", key.replace('.', "/")))
        else {
            assert!(in_other_netns(), "{line}");
            assert!(line.starts_with("info ") && line.contains("not in this netns"));
            continue;
        };
        assert!(
            line.starts_with("ok ") || line.starts_with("differs "),
            "{line}"
        );
        assert!(line.contains("buys:"), "{line}");
        // The host's current value, as the kernel has it.
        let now = now.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(line.contains(&now), "{key} is {now}: {line}");
    }
    for needed in [
        &format!("memlock (coral pid {pid})"),
        &format!("nofile (coral pid {pid})"),
        &format!("CPUs (coral pid {pid})"),
        "kernel.io_uring_disabled",
        "transparent_hugepage",
        "CPU isolation",
        "irqbalance",
        "lo rx-0 rps_cpus",
        "Udp RcvbufErrors",
    ] {
        assert!(
            text.contains(needed),
            "tuning/check lacks {needed}:\n{text}"
        );
    }
    let differs = text.lines().any(|l| l.starts_with("differs "));
    let strict = Command::new(tuning_path("check"))
        .args(["--pid", &pid, "--dev", "lo", "--strict"])
        .output()
        .unwrap();
    assert_eq!(strict.status.code(), Some(i32::from(differs)), "{text}");
    let bad = Command::new(tuning_path("check"))
        .arg("--frobnicate")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

/// `tuning/irq-affinity` dry: says what it would write and writes nothing;
/// a CPU list it cannot read is refused.
#[test]
fn tuning_irq_affinity_dry_run_writes_nothing() {
    let rps = "/sys/class/net/lo/queues/rx-0/rps_cpus";
    let before = std::fs::read_to_string(rps).unwrap();
    let out = Command::new(tuning_path("irq-affinity"))
        .args(["lo", "0"])
        .output()
        .expect("tuning/irq-affinity");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}");
    assert!(text.contains(&format!("> {rps}")), "{text}");
    assert!(text.contains("xps_cpus"), "{text}");
    assert!(text.contains("dry run: nothing written"), "{text}");
    assert_eq!(std::fs::read_to_string(rps).unwrap(), before);
    for bad in [
        &["lo", "two"][..],
        &["lo", "99999"],
        &["no-such-nic0", "0"],
        &["lo"],
    ] {
        let out = Command::new(tuning_path("irq-affinity"))
            .args(bad)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}");
    }
}

/// The drop-in sets what tuning/README.md says, and the unit with it
/// installed passes `systemd-analyze verify`; the README explains every
/// file in tuning/.
#[test]
fn tuning_drop_in_verifies_with_the_unit_and_every_file_is_explained() {
    let drop_in_path = tuning_path("systemd/coral.service.d/tuning.conf");
    let drop_in = std::fs::read_to_string(&drop_in_path).unwrap();
    assert!(drop_in.contains("[Service]"));
    for key in ["LimitMEMLOCK", "LimitNOFILE", "CPUAffinity"] {
        assert_eq!(unit_values(&drop_in, key).len(), 1, "tuning.conf: {key}=");
    }
    let readme = std::fs::read_to_string(tuning_path("README.md")).unwrap();
    for file in [
        "check",
        "sysctl.d/60-coral.conf",
        "systemd/coral.service.d/tuning.conf",
        "irq-affinity",
    ] {
        assert!(
            readme.contains(&format!("| `{file}` |")),
            "tuning/README.md does not explain {file}"
        );
    }
    let mut listed = Vec::new();
    let mut stack = vec![std::path::PathBuf::from(tuning_path(""))];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                listed.push(p);
            }
        }
    }
    for p in listed {
        let rel = p
            .strip_prefix(tuning_path(""))
            .unwrap()
            .display()
            .to_string();
        assert!(
            rel == "README.md" || readme.contains(&format!("`{rel}`")),
            "tuning/README.md does not explain {rel}"
        );
    }
    if !have_systemd_analyze() {
        eprintln!("SKIPPED: systemd-analyze is not installed (Debian package systemd)");
        return;
    }
    let dir = temp_dir("drop-in");
    let ovl = dir.path().join("ovl");
    std::fs::create_dir(&ovl).unwrap();
    let script = format!(
        "{}install -D -m 644 {drop_in_path} /etc/systemd/system/coral.service.d/tuning.conf\n\
         systemd-analyze verify /etc/systemd/system/coral.service\n",
        install_script(&ovl)
    );
    let out = in_mount_namespace(&script);
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify with the drop-in: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The host-wide settings `benches/tuning.sh` changes for a run and must
/// put back: rmem_max, wmem_max, netdev_max_backlog, transparent huge pages.
fn tuning_host_settings() -> Vec<(String, String)> {
    [
        "/proc/sys/net/core/rmem_max",
        "/proc/sys/net/core/wmem_max",
        "/proc/sys/net/core/netdev_max_backlog",
        "/sys/kernel/mm/transparent_hugepage/enabled",
    ]
    .iter()
    .filter_map(|p| Some((p.to_string(), std::fs::read_to_string(p).ok()?)))
    .collect()
}

/// Runs `benches/tuning.sh --quick` with `env`: its exit status and output.
fn tuning_bench(env: &[(&str, &str)]) -> (Option<std::process::ExitStatus>, String) {
    let out = temp_dir("tuning-bench");
    let mut cmd = Command::new("bash");
    cmd.arg(format!("{}/benches/tuning.sh", repo()))
        .arg("--quick")
        .env("CORAL", CORAL)
        .env("OUT", out.path())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(out.path().join("stdout")).unwrap())
        .stderr(std::fs::File::create(out.path().join("stderr")).unwrap());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut p = Proc::spawn(&mut cmd, "bash benches/tuning.sh");
    // Generous: a loaded 2-core machine; its EXIT trap stops what it started.
    let status = p.exit_within(Duration::from_secs(300));
    if status.is_none() {
        p.signal(libc::SIGTERM);
        let _ = p.exit_within(Duration::from_secs(30));
    }
    let text = ["stdout", "stderr"]
        .iter()
        .map(|f| std::fs::read_to_string(out.path().join(f)).unwrap_or_default())
        .collect::<String>();
    (status, text)
}

/// `benches/tuning.sh --quick` (the experiments that change nothing of the
/// host's: each runs in a network namespace of its own) prints its table
/// with before and after for every metric; a run that fails (a node that
/// exits at once) ends the script with status 1 and the host-wide
/// settings it had changed put back. Needs root.
#[test]
fn tuning_bench_runs_quick_and_puts_the_hosts_settings_back() {
    // SAFETY: geteuid(2) reads this process's effective user id.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: benches/tuning.sh sets kernel settings: run as root");
        return;
    }
    let host = tuning_host_settings();
    let have_wrk = Command::new("sh")
        .args(["-c", "command -v wrk"])
        .output()
        .is_ok_and(|o| o.status.success());
    let (status, text) = tuning_bench(&[("EXPERIMENTS", "accept ports twreuse memlock")]);
    assert!(status.is_some_and(|s| s.success()), "{status:?}\n{text}");
    assert!(text.contains("after/before"), "no table:\n{text}");
    let floor = Path::new(CORAL).parent().unwrap().join("examples/floor");
    if have_wrk && floor.exists() {
        for (exp, metric) in [
            ("accept", "ListenOverflows"),
            ("accept", "p99 ms"),
            ("ports", "TIME_WAIT to origin"),
            ("twreuse", "non-2xx"),
            ("memlock", "Skipping lines"),
            ("memlock", "requests/server-CPU-s"),
        ] {
            let row = text
                .lines()
                .find(|l| l.starts_with(&format!("{exp} ")) && l.contains(metric))
                .unwrap_or_else(|| panic!("no {exp} {metric} row:\n{text}"));
            // Before and after each have min/median/max.
            assert_eq!(
                row.split_whitespace()
                    .filter(|w| w.split('/').count() == 3
                        && w.split('/').all(|n| n.parse::<f64>().is_ok()))
                    .count(),
                2,
                "{row}"
            );
        }
        // Hits were served in both memlock runs.
        let hits = text
            .lines()
            .find(|l| l.starts_with("memlock ") && l.contains(" requests "))
            .unwrap();
        assert!(!hits.contains(" 0/0/0 "), "{hits}");
    } else {
        eprintln!("note: no wrk or no floor example: the HTTP experiments were skipped");
    }
    assert_eq!(tuning_host_settings(), host, "the host's settings changed");

    let (status, text) = tuning_bench(&[("EXPERIMENTS", "bufs backlog"), ("CORAL", "/bin/false")]);
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{text}");
    assert!(text.contains("bufs before round 1 failed"), "{text}");
    assert_eq!(
        tuning_host_settings(),
        host,
        "a failed run left the host's settings changed"
    );
}

/// `.ci/run` stops no service (it never kills by name, never stops a unit):
/// the packages it installs are kept from starting by a policy-rc.d that it
/// removes again, and only if the machine had none.
#[test]
fn ci_run_touches_no_process_it_did_not_start() {
    let path = format!("{}/.ci/run", repo());
    let text = std::fs::read_to_string(&path).unwrap();
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    for banned in ["pkill", "killall", "systemctl stop", "kill -", "kill $"] {
        assert!(!code.contains(banned), ".ci/run runs {banned:?}");
    }
    assert!(
        !code.lines().any(|l| l.trim_start().starts_with("service ")),
        ".ci/run stops a service"
    );
    assert!(code.contains("/usr/sbin/policy-rc.d") && code.contains("exit 101"));
    assert!(
        code.contains("if [ ! -e \"$policy\" ]"),
        "the machine's own policy-rc.d is kept"
    );
    assert!(code.contains("rm -f \"$policy\""));
    let out = Command::new("bash").args(["-n", &path]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
