//! Parsers of the values variables hold (booleans, core lists, byte counts), and the reader of
//! torchrun-style fallback variables.

/// Reads a torchrun-style fallback variable, treating an empty value as unset.
pub fn fallback(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Parses 1/0, true/false, yes/no, on/off (any case; empty is false).
pub fn parse_bool(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" | "" => Some(false),
        _ => None,
    }
}

/// The largest CPU number a core list may name: Linux's own limit (`CONFIG_NR_CPUS` at most
/// 8192), so that a typo such as `0-4294967295` is refused, not expanded into gigabytes.
pub const MAX_CPU: usize = 8191;

/// Parses `3,5-7` into `[3, 5, 6, 7]` (CPU numbers up to [`MAX_CPU`]).
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    let cpu = |t: &str| t.trim().parse::<usize>().ok().filter(|&c| c <= MAX_CPU);
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (cpu(a)?, cpu(b)?);
                if a > b {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(cpu(part)?),
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Parses `123`, `64K`, `16M`, `1G`, `2T` (binary multiples), ignoring surrounding spaces.
pub fn parse_size(text: &str) -> Option<usize> {
    let t = text.trim();
    let (digits, mult) = match t.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return None,
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    let n: u64 = digits.trim().parse().ok()?;
    usize::try_from(n.checked_mul(mult)?).ok()
}
