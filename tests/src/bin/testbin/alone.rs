//! Commands that run without the testbin's one bootstrap of the job: the heap snoop, the
//! attack and the bootstrap flood (outsiders), a join from a thread that ends, a job joined twice in turn, and
//! a straggler.

use std::{process::ExitCode, time::Duration};

use pshmem_bootstrap::Bootstrap;

use crate::{AloneCmd, attack, flood, report, snoop};

/// Runs `cmd`.
pub fn run(cmd: &AloneCmd) -> ExitCode {
    match cmd {
        AloneCmd::HeapSnoop { seconds, stop_file } => snoop::run(*seconds, stop_file),
        AloneCmd::Attack { seconds, stop_file } => attack::run(*seconds, stop_file),
        AloneCmd::BsFlood {
            addr,
            seconds,
            keep,
            probes,
        } => flood::run(addr, *seconds, *keep, *probes),
        AloneCmd::BsThreadInit { hold_ms } => thread_init(*hold_ms),
        AloneCmd::BsReinit => reinit(),
        AloneCmd::BsStraggler { rank, ms } => straggler(*rank, *ms),
    }
}

fn thread_init(hold_ms: u64) -> ExitCode {
    let bs = match std::thread::spawn(Bootstrap::from_env).join() {
        Ok(Ok(bs)) => bs,
        Ok(Err(e)) => return report(&e),
        Err(_) => panic!("the init thread panicked"),
    };
    println!("PID={}", std::process::id());
    std::thread::sleep(Duration::from_millis(hold_ms));
    drop(bs);
    ExitCode::SUCCESS
}

/// Two jobs in turn in one process, the second joined as soon as the first is finalized (the
/// same address: rank 0 must not take a rank's second hello for a rank joining twice).
fn reinit() -> ExitCode {
    for round in 0..2 {
        let bs = match Bootstrap::from_env() {
            Ok(b) => b,
            Err(e) => return report(&e),
        };
        if let Err(e) = bs.barrier().and_then(|()| bs.finalize()) {
            return report(&e);
        }
        println!("OK reinit round={round}");
    }
    ExitCode::SUCCESS
}

/// Rank `late` reaches the second barrier `ms` late: past the op timeout, every rank must name
/// it (the error is printed as an ERR line).
fn straggler(late: usize, ms: u64) -> ExitCode {
    let bs = match Bootstrap::from_env() {
        Ok(b) => b,
        Err(e) => return report(&e),
    };
    if let Err(e) = bs.barrier() {
        return report(&e);
    }
    if bs.rank() == late {
        std::thread::sleep(Duration::from_millis(ms));
    }
    match bs.barrier() {
        Err(e) => report(&e),
        Ok(()) => ExitCode::SUCCESS,
    }
}
