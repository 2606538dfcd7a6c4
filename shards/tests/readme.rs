//! The README's "Using it" block, run line by line as a reader would type
//! it, with `coral` on PATH and the set-up's `coral node` running — inside a
//! network namespace of its own, so its default addresses (127.0.0.1:7000,
//! :7080) meet nothing else on this host. Needs root and `unshare`/`ip`
//! (iproute2); `.ci/run` runs the tests as root.
//!
//! Every line runs as written except `coral sim hotspot`, which gets
//! `--no-baseline` appended (its plain-DHT baseline alone takes two minutes).

mod common;

use std::process::{Command, Stdio};

use common::{temp_dir, Proc, CORAL};

/// The fenced block after the `## Using it` heading.
fn using_it_block() -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    let section = readme
        .split("## Using it")
        .nth(1)
        .expect("a `## Using it` section");
    let block = section
        .split("```sh")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a ```sh block in `## Using it`");
    block
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[test]
fn readme_using_it_block_runs_as_written() {
    let lines = using_it_block();
    assert!(lines.len() >= 5, "{lines:?}");
    let usable = Command::new("unshare")
        .args(["-n", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !usable {
        eprintln!("SKIPPED: needs root and unshare(1) to run the README in a network namespace");
        return;
    }
    let tmp = temp_dir("readme");
    let dir = tmp.path();
    let bin = std::path::Path::new(CORAL).parent().unwrap();
    let mut script = String::from(
        "set -u\n\
         ip link set lo up\n\
         trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n\
         ready() { for _ in $(seq 600); do coral levels --node \"$1\" >/dev/null 2>&1 && return 0; sleep 0.1; done; echo \"NOT READY $1\"; exit 1; }\n\
         coral node --cores 1 >node-setup.log 2>&1 &\n\
         ready 127.0.0.1:7080\n",
    );
    for line in &lines {
        let code = line.split(" #").next().unwrap_or(line).trim();
        script.push_str(&format!("echo \">>> {}\"\n", code.replace('"', "'")));
        if let Some(bg) = code.strip_suffix('&') {
            // A node in the background: started as written, then waited for.
            let admin = bg
                .split_whitespace()
                .skip_while(|w| *w != "--admin")
                .nth(1)
                .unwrap_or("127.0.0.1:7080");
            script.push_str(&format!("{bg} >>node-bg.log 2>&1 &\nready {admin}\n"));
        } else {
            let run = if code.starts_with("coral sim hotspot") {
                format!("{code} --no-baseline")
            } else {
                code.to_string()
            };
            script.push_str(&format!(
                "{run} || {{ echo \"FAILED ($?): \"{}; exit 1; }}\n",
                shell_quote(code)
            ));
        }
    }
    script.push_str("echo ALL-LINES-PASSED\n");
    std::fs::write(dir.join("readme.sh"), &script).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // The namespace's script in a process group of its own, killed (with
    // any node it left) when the test ends.
    let mut group = Proc::spawn(
        Command::new("unshare")
            .args(["-n", "bash", "readme.sh"])
            .current_dir(dir)
            .env("PATH", path)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
        "unshare",
    );
    let stdout = group.child().stdout.take().unwrap();
    let stderr = group.child().stderr.take().unwrap();
    let err = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let out = std::io::read_to_string(stdout).unwrap_or_default();
    let status = group.child().wait().unwrap();
    let err = err.join().unwrap();
    let logs = std::fs::read_to_string(dir.join("node-setup.log")).unwrap_or_default();
    assert!(
        status.success() && out.contains("ALL-LINES-PASSED"),
        "README block failed ({status}):\n{out}\n--- stderr\n{err}\n--- node log\n{logs}"
    );
    // The get on the second node found what the put on the first stored.
    assert!(out.contains("found 1 value(s)"), "{out}");
    assert!(out.contains("127.0.0.1:8090"), "{out}");
    assert!(dir.join("clusters.svg").exists());
}
