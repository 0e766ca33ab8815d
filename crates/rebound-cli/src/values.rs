//! Value sizes drawn from a distribution (`load --value-dist`), and value
//! bytes no engine can compress.
//!
//! Every size is a function of a seeded generator, so a run's rows (and
//! the live data they add up to) are the same on every engine.

use rand::rngs::SmallRng;
use rand::{Rng, RngCore};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How long the values of a run are.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ValueSizes {
    /// Every value is `bytes` long.
    Fixed { bytes: usize },
    /// Uniform in `min..=max`.
    Uniform { min: usize, max: usize },
    /// Log-normal with median `median` and shape `sigma` (of the natural
    /// logarithm), capped at `max`: a draw above it is `max`.
    LogNormal {
        median: usize,
        sigma: f64,
        max: usize,
    },
}

impl ValueSizes {
    /// The longest value the distribution yields (a table's limit).
    pub fn max(&self) -> usize {
        match *self {
            ValueSizes::Fixed { bytes } => bytes,
            ValueSizes::Uniform { max, .. } | ValueSizes::LogNormal { max, .. } => max,
        }
    }

    /// The sizes in a line of output: a fixed size is its number.
    pub fn describe(&self) -> String {
        match *self {
            ValueSizes::Fixed { bytes } => bytes.to_string(),
            _ => self.to_string(),
        }
    }

    pub fn sample(&self, rng: &mut impl Rng) -> usize {
        match *self {
            ValueSizes::Fixed { bytes } => bytes,
            ValueSizes::Uniform { min, max } => rng.gen_range(min..=max),
            ValueSizes::LogNormal { median, sigma, max } => {
                let drawn = median as f64 * (sigma * standard_normal(rng)).exp();
                // `as` saturates, so a huge draw is capped like any other.
                (drawn.round() as usize).min(max)
            }
        }
    }

    fn validate(self) -> Result<ValueSizes, String> {
        match self {
            ValueSizes::Uniform { min, max } if min > max => {
                Err(format!("uniform: min {min} is above max {max}"))
            }
            ValueSizes::LogNormal { sigma, .. } if !(sigma.is_finite() && sigma >= 0.0) => {
                Err(format!("lognormal: sigma {sigma} must be finite and >= 0"))
            }
            ValueSizes::LogNormal { median, max, .. } if median == 0 || median > max => Err(
                format!("lognormal: median {median} must be in 1..=max ({max})"),
            ),
            ok => Ok(ok),
        }
    }
}

/// A standard normal draw (Box-Muller): the crate has `rand` but not
/// `rand_distr`, and one draw per value is all it needs.
fn standard_normal(rng: &mut impl Rng) -> f64 {
    // 1 - [0, 1) is in (0, 1], so the logarithm is finite.
    let u1 = 1.0 - rng.gen::<f64>();
    let u2 = rng.gen::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// The spelling `FromStr` reads back.
impl fmt::Display for ValueSizes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ValueSizes::Fixed { bytes } => write!(f, "fixed:{bytes}"),
            ValueSizes::Uniform { min, max } => write!(f, "uniform:{min}:{max}"),
            ValueSizes::LogNormal { median, sigma, max } => {
                write!(f, "lognormal:{median}:{sigma}:{max}")
            }
        }
    }
}

/// `fixed:N`, `uniform:MIN:MAX` or `lognormal:MEDIAN:SIGMA:MAX`; sizes
/// in bytes, or with a `k`/`m` suffix for KiB/MiB.
impl FromStr for ValueSizes {
    type Err = String;

    fn from_str(s: &str) -> Result<ValueSizes, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let sizes = match parts.as_slice() {
            ["fixed", n] => ValueSizes::Fixed { bytes: bytes(n)? },
            ["uniform", min, max] => ValueSizes::Uniform {
                min: bytes(min)?,
                max: bytes(max)?,
            },
            ["lognormal", median, sigma, max] => ValueSizes::LogNormal {
                median: bytes(median)?,
                sigma: sigma
                    .parse()
                    .map_err(|_| format!("lognormal: sigma {sigma:?} is not a number"))?,
                max: bytes(max)?,
            },
            _ => {
                return Err(format!(
                    "{s:?}: expected fixed:N, uniform:MIN:MAX or lognormal:MEDIAN:SIGMA:MAX"
                ))
            }
        };
        sizes.validate()
    }
}

/// A byte count: digits, optionally followed by `k` (KiB) or `m` (MiB).
pub fn bytes(s: &str) -> Result<usize, String> {
    let (digits, unit) = match s.strip_suffix(['k', 'K']) {
        Some(d) => (d, 1 << 10),
        None => match s.strip_suffix(['m', 'M']) {
            Some(d) => (d, 1 << 20),
            None => (s, 1),
        },
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("{s:?} is not a byte count (e.g. 100, 64k, 1m)"))
}

/// A value of `size` random bytes: an engine that compresses (fjall's
/// lz4, RocksDB's snappy where its library has it) stores as much as one
/// that does not, so the space figures compare layouts, not codecs.
pub fn fill_random(buf: &mut Vec<u8>, size: usize, rng: &mut SmallRng) {
    buf.clear();
    buf.resize(size, 0);
    rng.fill_bytes(buf);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn spellings_round_trip_and_bad_ones_are_refused() {
        for s in ["fixed:100", "uniform:10:1000", "lognormal:1024:1.7:1048576"] {
            assert_eq!(s.parse::<ValueSizes>().unwrap().to_string(), s);
        }
        let k = "lognormal:1k:1.7:1m".parse::<ValueSizes>().unwrap();
        assert_eq!(k.to_string(), "lognormal:1024:1.7:1048576");
        for bad in [
            "fixed",
            "uniform:5:4",
            "lognormal:0:1:10",
            "lognormal:100:-1:1000",
            "lognormal:100:nan:1000",
            "lognormal:2000:1:1000",
            "gamma:1:2",
            "fixed:1x",
        ] {
            assert!(bad.parse::<ValueSizes>().is_err(), "{bad}");
        }
    }

    #[test]
    fn draws_stay_in_bounds_and_the_median_is_near_its_parameter() {
        let mut rng = SmallRng::seed_from_u64(7);
        let uniform = ValueSizes::Uniform { min: 10, max: 1000 };
        let u: Vec<usize> = (0..20_000).map(|_| uniform.sample(&mut rng)).collect();
        assert!(u.iter().all(|&n| (10..=1000).contains(&n)));
        assert!(u.contains(&10) && u.contains(&1000));
        let log = ValueSizes::LogNormal {
            median: 1024,
            sigma: 1.7,
            max: 255 << 10,
        };
        let mut l: Vec<usize> = (0..20_000).map(|_| log.sample(&mut rng)).collect();
        l.sort_unstable();
        assert!(*l.last().unwrap() <= 255 << 10);
        let median = l[l.len() / 2] as f64;
        assert!((900.0..1150.0).contains(&median), "median {median}");
        // P(draw > 255 KiB) = P(z > ln(255)/1.7 = 3.26) ≈ 5.6e-4: ~11 capped.
        let capped = l.iter().filter(|&&n| n == 255 << 10).count();
        assert!((2..40).contains(&capped), "{capped} capped");
    }

    #[test]
    fn random_values_have_their_size_and_differ() {
        let mut rng = SmallRng::seed_from_u64(1);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        fill_random(&mut a, 20, &mut rng);
        fill_random(&mut b, 20, &mut rng);
        assert_eq!((a.len(), b.len()), (20, 20));
        assert_ne!(a, b);
        fill_random(&mut a, 0, &mut rng);
        assert!(a.is_empty());
    }
}
