//! pshmem-info on this machine and on the synthetic p5 topology.

use std::process::Command;

fn info(envs: &[(&str, &str)], args: &[&str]) -> String {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pshmem-info"));
    c.args(args).env_remove("PSHMEM_TOPOLOGY_XML");
    for (k, v) in envs {
        c.env(k, v);
    }
    let out = c.output().expect("run pshmem-info");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn on_this_machine_every_section_is_printed() {
    let s = info(&[], &[]);
    for section in [
        "== Topology",
        "== CUDA",
        "== libfabric",
        "== Placement",
        "== Environment",
        "== Warnings",
    ] {
        assert!(s.contains(section), "missing {section}:\n{s}");
    }
    assert!(s.contains("PSHMEM_SYMMETRIC_SIZE"), "{s}");
    assert!(s.contains("local PE 0"), "{s}");
}

#[test]
fn the_p5_topology_maps_each_gpu_to_its_four_nics() {
    let xml = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../runtime/topology/tests/topologies/p5.48xlarge.xml"
    );
    let s = info(
        &[("PSHMEM_TOPOLOGY_XML", xml)],
        &["--local-size", "8", "--proxy-threads", "2"],
    );
    let pes: Vec<&str> = s.lines().filter(|l| l.starts_with("local PE ")).collect();
    assert_eq!(pes.len(), 8, "{s}");
    for l in &pes {
        assert_eq!(l.matches("rdmap").count(), 4, "{l}");
        assert!(!l.contains("unpinned"), "{l}");
    }
    assert_eq!(s.matches("(same PCIe switch)").count(), 32, "{s}");
}

#[test]
fn a_missing_topology_file_is_a_warning_not_a_crash() {
    let s = info(&[("PSHMEM_TOPOLOGY_XML", "/nonexistent/topology.xml")], &[]);
    assert!(s.contains("fallback"), "{s}");
    assert!(
        s.contains("warning: could not read the topology of /nonexistent/topology.xml"),
        "{s}"
    );
}
