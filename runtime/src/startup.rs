//! Where start-up time goes: a stopwatch over init's phases, logged at `info` as one line per
//! PE (`PSHMEM_LOG=info`). Start-up is a cost every job pays once, and a slow phase (a
//! provider that probes for absent NICs, a large pinned allocation) is invisible otherwise.

use std::time::{Duration, Instant};

pub(crate) struct Phases {
    me: usize,
    what: &'static str,
    start: Instant,
    last: Instant,
    done: Vec<(&'static str, Duration)>,
}

impl Phases {
    pub(crate) fn start(me: usize, what: &'static str) -> Self {
        let now = Instant::now();
        Self {
            me,
            what,
            start: now,
            last: now,
            done: Vec::new(),
        }
    }

    /// Ends the phase running since the previous mark (or the start).
    pub(crate) fn mark(&mut self, phase: &'static str) {
        let now = Instant::now();
        self.done.push((phase, now - self.last));
        self.last = now;
    }

    /// The line logged by [`Phases::log`].
    pub(crate) fn line(&self) -> String {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let phases: Vec<String> = self
            .done
            .iter()
            .map(|(p, d)| format!("{p} {:.1}", ms(*d)))
            .collect();
        format!(
            "PE {}: {} took {:.1} ms: {}",
            self.me,
            self.what,
            ms(self.last - self.start),
            phases.join(", ")
        )
    }

    pub(crate) fn log(&self) {
        tracing::info!("{}", self.line());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_phase_is_named_with_its_share_of_the_total() {
        let mut p = Phases::start(3, "init");
        std::thread::sleep(Duration::from_millis(5));
        p.mark("a");
        p.mark("b");
        let line = p.line();
        assert!(line.starts_with("PE 3: init took "), "{line}");
        let a: f64 = line
            .split("a ")
            .nth(1)
            .and_then(|s| s.split(',').next())
            .and_then(|s| s.parse().ok())
            .expect("phase a's time");
        assert!(a >= 5.0, "{line}");
        // In the order they ran, after the total.
        let (ia, ib) = (line.find(": a ").expect("a"), line.find(", b ").expect("b"));
        assert!(ia < ib, "{line}");
    }
}
