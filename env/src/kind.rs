//! The table's *kind* and *bounds* columns: what values a variable takes ([`Kind`]) and the
//! inclusive range of a numeric one ([`Range`]), with their descriptions.

use crate::{parse_bool, parse_cpu_list, parse_size};

/// What values a variable takes (the table's *kind* column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An unsigned integer.
    Count,
    /// A byte count: an unsigned integer with an optional K, M, G or T suffix.
    Size,
    /// 0/1, true/false, yes/no, on/off.
    Bool,
    /// Seconds (fractions allowed).
    Seconds,
    /// Whole milliseconds.
    Millis,
    /// Whole microseconds.
    Micros,
    /// A non-negative decimal number.
    Number,
    /// 64 bits in hexadecimal.
    Hex,
    /// `host:port`.
    Address,
    /// A list of cores such as `3,5-7`, or `none`.
    CpuList,
    /// A file.
    Path,
    /// Free text (a name, a filter).
    Text,
    /// One of the listed words.
    Choice(&'static [&'static str]),
}

impl Kind {
    /// The kind's name in the table.
    pub fn describe(self) -> String {
        match self {
            Kind::Count => "count".into(),
            Kind::Size => "size".into(),
            Kind::Bool => "bool".into(),
            Kind::Seconds => "seconds".into(),
            Kind::Millis => "milliseconds".into(),
            Kind::Micros => "microseconds".into(),
            Kind::Number => "number".into(),
            Kind::Hex => "hex".into(),
            Kind::Address => "host:port".into(),
            Kind::CpuList => "core list".into(),
            Kind::Path => "path".into(),
            Kind::Text => "text".into(),
            Kind::Choice(words) => words.join(" \\| "),
        }
    }
}

impl Kind {
    /// Whether `value` is one of this kind's values (why not, if not).
    pub fn check(self, value: &str) -> Result<(), &'static str> {
        let v = value.trim();
        let ok = match self {
            Kind::Count | Kind::Size | Kind::Millis | Kind::Micros => parse_size(v).is_some(),
            Kind::Bool => parse_bool(v).is_some(),
            Kind::Seconds | Kind::Number => {
                v.parse::<f64>().is_ok_and(|x| x.is_finite() && x >= 0.0)
            }
            Kind::Hex => u64::from_str_radix(v.trim_start_matches("0x"), 16).is_ok(),
            Kind::Address => v
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok()),
            Kind::CpuList => v == "none" || parse_cpu_list(v).is_some(),
            Kind::Path | Kind::Text => true,
            Kind::Choice(words) => words.contains(&v),
        };
        if ok {
            Ok(())
        } else {
            Err(match self {
                Kind::Count => "expected an unsigned integer (K/M/G suffix allowed)",
                Kind::Size => "expected a byte count such as 1G",
                Kind::Bool => "expected 0/1, true/false, yes/no or on/off",
                Kind::Seconds => "expected a non-negative number of seconds",
                Kind::Millis => "expected whole milliseconds",
                Kind::Micros => "expected whole microseconds",
                Kind::Number => "expected a non-negative number",
                Kind::Hex => "expected 64 bits in hexadecimal",
                Kind::Address => "expected host:port",
                Kind::CpuList => "expected 'none' or a list such as 3,5-7",
                Kind::Path | Kind::Text => "unreachable",
                Kind::Choice(_) => "expected one of the listed values",
            })
        }
    }
}

/// The bounds of a numeric variable, inclusive, in its kind's unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    /// Smallest value.
    pub lo: f64,
    /// Largest value.
    pub hi: f64,
}

/// No bounds (text, paths, booleans, choices).
pub const ANY: Range = Range {
    lo: f64::NEG_INFINITY,
    hi: f64::INFINITY,
};

/// Bounds `lo..=hi`.
pub const fn between(lo: f64, hi: f64) -> Range {
    Range { lo, hi }
}

impl Range {
    /// Whether there are bounds.
    pub fn bounded(&self) -> bool {
        self.lo.is_finite() || self.hi.is_finite()
    }

    /// "1..=32", "0.1..=86400".
    pub fn describe(&self) -> String {
        format!("{}..={}", show(self.lo), show(self.hi))
    }
}

/// A bound as written in the table: whole numbers without a fraction, byte counts in K/M/G/T.
fn show(v: f64) -> String {
    let u = v as u64;
    if v.fract() != 0.0 || v < 0.0 {
        return v.to_string();
    }
    for (s, m) in [
        ("T", 1u64 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ] {
        if u >= m && u % m == 0 {
            return format!("{}{s}", u / m);
        }
    }
    u.to_string()
}
