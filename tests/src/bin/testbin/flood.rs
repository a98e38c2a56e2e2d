//! A connection flood of a bootstrap port, as a hostile local user would run one: connect as
//! fast as possible and send nothing, keeping the newest connections open. The first `probes`
//! wait briefly each to see whether rank 0 closes them at once.

use std::{
    collections::VecDeque,
    io::Read,
    net::TcpStream,
    time::{Duration, Instant},
};

/// How long a probe waits for rank 0 to close it.
const PROBE_WAIT: Duration = Duration::from_millis(300);

/// Floods `addr` for `seconds`, `keep` connections open at most, the first `probe` of them
/// probes. Prints `FLOOD connects=N probes=P closed_at_once=C`.
pub fn run(addr: &str, seconds: f64, keep: usize, probe: usize) -> std::process::ExitCode {
    // Room for every connection: an attacker keeps them all, so that those holding rank 0's
    // handshake slots stay open.
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard.min(8192), hard);
    }
    let t0 = Instant::now();
    let limit = Duration::from_secs_f64(seconds);
    let mut open: VecDeque<TcpStream> = VecDeque::new();
    let (mut connects, mut probes, mut closed) = (0u64, 0usize, 0usize);
    while t0.elapsed() < limit {
        let Ok(mut s) = TcpStream::connect(addr) else {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        };
        connects += 1;
        if probes < probe {
            probes += 1;
            let _ = s.set_read_timeout(Some(PROBE_WAIT));
            let mut b = [0u8; 1];
            // Ok(0): closed by rank 0; an error (timeout, or reset): still open or reset.
            if matches!(s.read(&mut b), Ok(0)) {
                closed += 1;
            }
        }
        open.push_back(s);
        if open.len() > keep {
            open.pop_front();
        }
    }
    println!("FLOOD connects={connects} probes={probes} closed_at_once={closed}");
    std::process::ExitCode::SUCCESS
}
