//! Helpers the side-by-side benchmarks share: the CPUs this process may use,
//! and a process's CPU time (with its children's) from /proc.

/// The CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set for the kernel to fill.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return vec![0];
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// CPU seconds (user + system) of process `pid` and its children: utime and
/// stime are fields 14 and 15 of /proc/PID/stat, after the command name.
pub fn cpu_secs(pid: u32) -> f64 {
    let mut total = 0.0;
    let mut pids = vec![pid];
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    pids.extend(
        children
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok()),
    );
    for p in pids {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: f64 = f.get(11).and_then(|s| s.parse().ok()).unwrap_or(0.0)
            + f.get(12).and_then(|s| s.parse().ok()).unwrap_or(0.0);
        // SAFETY: sysconf has no preconditions.
        total += ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    }
    total
}
