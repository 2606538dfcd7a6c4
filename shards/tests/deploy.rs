//! The deployment files in `deploy/`: the systemd unit passes
//! `systemd-analyze verify` (skipped only where systemd-analyze is absent;
//! `.ci/run` installs it), the seccomp profile allows io_uring, the
//! DaemonSet uses host networking and the admin probes.

mod common;

use std::process::Command;

use common::{temp_dir, CORAL};

fn deploy(name: &str) -> String {
    let p = format!("{}/../deploy/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

#[test]
fn systemd_unit_passes_systemd_analyze_verify() {
    let unit = deploy("coral.service");
    for needed in [
        "Type=notify",
        "AmbientCapabilities=CAP_NET_BIND_SERVICE",
        "CapabilityBoundingSet=CAP_NET_BIND_SERVICE",
        "LimitMEMLOCK=",
        "LimitNOFILE=",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "ProtectSystem=strict",
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
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIPPED: systemd-analyze is not installed (Debian package systemd)");
        return;
    }
    let dir = temp_dir("unit");
    // verify needs the ExecStart binary to exist: the one just built.
    let path = dir.path().join("coral.service");
    std::fs::write(&path, unit.replace("/usr/local/bin/coral", CORAL)).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    drop(dir);
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
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
