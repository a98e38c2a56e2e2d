//! The rings' stash: operations taken out of a ring while the proxy waits for its GPU.

use super::*;

/// Operations stashed out of the ring while the proxy waits for its GPU (`stash_rings`, run by
/// the AMO's wait) are taken before the ring's later ones, in order, none lost or doubled.
#[test]
fn stashed_operations_keep_their_order() {
    let fab = modes(1)[3].1.clone();
    let mut w = World::new(2, fab, cfg());
    let p = |value| Desc::P {
        pe: Pe::new(1),
        remote: 64,
        value,
        width: 8,
    };
    for v in 1..=6 {
        w.push(0, p(v));
    }
    // Two waits of the proxy, 4 operations each at most: all six go to the stash.
    crate::engine::work::stash_rings(&mut w.engines[0].init.rings, 4);
    crate::engine::work::stash_rings(&mut w.engines[0].init.rings, 4);
    assert_eq!(w.engines[0].init.rings[0].stash.len(), 6);
    assert!(!w.engines[0].idle(), "stashed work is work");
    let mut last = 0;
    for v in 7..=9 {
        last = w.push(0, p(v));
    }
    let mut seen = Vec::new();
    w.run(
        |w| w.completed(0) >= last,
        |w| {
            let v = w.word(1, 64);
            if seen.last() != Some(&v) {
                seen.push(v);
            }
        },
    );
    assert_eq!(
        w.word(1, 64),
        9,
        "the ring's later operations came after the stash"
    );
    assert!(
        seen.windows(2).all(|p| p[0] < p[1]),
        "out of order: {seen:?}"
    );
    assert!(w.engines[0].init.rings[0].stash.is_empty());
}
