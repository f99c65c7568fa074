//! The planner's test oracle: nesting strides into a dense parent by exhaustive search.
//!
//! This was the planner before [`super::nest`] replaced it (it searched every admissible
//! divisor, so its cost grew with the extents). It stays as an independent answer to "does a
//! parent exist?" for the property test that compares the two on random layouts. Given the varying dimensions sorted by |stride|, find parent strides `P₀ = 1 | P₁ | … ` with
//! `Pⱼ` dividing `strideⱼ` (so the dimension steps by `strideⱼ / Pⱼ` in the parent) and
//! `Pⱼ₊₁ ≥ Pⱼ + (lenⱼ - 1)·strideⱼ` (so its range fits inside parent dimension `j`). Taking
//! `Pⱼ₊₁ = strideⱼ₊₁` every time is not enough: `a[:, ::4, ::4]` of a 6×6×6 C-order array has
//! strides (36, 24, 4) and only nests as the original 6×6×6 parent with `P₁ = 6`. So the search
//! tries every admissible divisor, smallest first, remembering dead ends.

use std::collections::HashSet;

use super::CopyReason;
use super::nest::Link;

/// Beyond this, divisors are not enumerated (trial division would take too long); only the
/// stride itself is tried. Real strides are far smaller: 2⁴⁰ elements is a terabyte.
const DIVISOR_SEARCH_LIMIT: u64 = 1 << 40;

/// Work (search steps plus trial divisions) one plan may spend before giving up on a view:
/// adversarial strides with many divisors must not stall an import. Real layouts need a few
/// hundred steps.
const WORK_BUDGET: u64 = 20_000_000;

/// Why no parent was found.
const NO_NEST: &str = CopyReason::NoNest.message();
pub(crate) const OVER_BUDGET: &str = "the strides are too irregular to plan a view quickly";

/// Parent strides for `links` (sorted by stride), or why no dense parent holds them.
pub(crate) fn nest(links: &[Link]) -> Result<Vec<u64>, &'static str> {
    if links.is_empty() {
        return Ok(Vec::new());
    }
    let mut search = Search {
        links,
        dead_ends: HashSet::new(),
        work: 0,
    };
    let mut parent_strides = Vec::with_capacity(links.len());
    if search.step(0, 1, &mut parent_strides) {
        Ok(parent_strides)
    } else if search.work > WORK_BUDGET {
        Err(OVER_BUDGET)
    } else {
        Err(NO_NEST)
    }
}

/// A depth-first search over admissible parent strides, smallest first.
struct Search<'a> {
    links: &'a [Link],
    /// (level, parent stride) pairs known not to lead to a parent.
    dead_ends: HashSet<(usize, u64)>,
    work: u64,
}

impl Search<'_> {
    /// Tries parent stride `p` for link `j`, extending `out` on success.
    fn step(&mut self, j: usize, p: u64, out: &mut Vec<u64>) -> bool {
        self.work += 1;
        let links = self.links;
        if self.work > WORK_BUDGET || !links[j].stride.is_multiple_of(p) {
            return false;
        }
        out.push(p);
        if j + 1 == links.len() {
            return true;
        }
        let fits = (links[j].len - 1)
            .checked_mul(links[j].stride)
            .and_then(|reach| reach.checked_add(p));
        let next = links[j + 1].stride;
        if let Some(bound) = fits.filter(|_| next.is_multiple_of(p)) {
            let (divisors, cost) = divisors_at_least(next / p, bound.div_ceil(p));
            self.work += cost;
            for q in divisors {
                let candidate = p * q;
                if self.dead_ends.contains(&(j + 1, candidate)) {
                    continue;
                }
                if self.step(j + 1, candidate, out) {
                    return true;
                }
                if self.work > WORK_BUDGET {
                    break;
                }
                self.dead_ends.insert((j + 1, candidate));
            }
        }
        out.pop();
        false
    }
}

/// Divisors of `n` that are ≥ `at_least`, ascending, and the trial divisions it took.
fn divisors_at_least(n: u64, at_least: u64) -> (Vec<u64>, u64) {
    if n > DIVISOR_SEARCH_LIMIT {
        return (if n >= at_least { vec![n] } else { vec![] }, 1);
    }
    let mut small = Vec::new();
    let mut large = Vec::new();
    let mut d = 1u64;
    while d * d <= n {
        if n.is_multiple_of(d) {
            small.push(d);
            if d * d != n {
                large.push(n / d);
            }
        }
        d += 1;
    }
    small.extend(large.into_iter().rev());
    small.retain(|&d| d >= at_least);
    (small, d)
}

/// The smallest last parent stride over every admissible chain (hence the least overhang any
/// parent can have), or `None` when no chain exists. Enumerates all chains: small inputs only.
pub(crate) fn least_last_stride(links: &[Link]) -> Option<u64> {
    fn walk(links: &[Link], j: usize, p: u64, best: &mut Option<u64>) {
        if !links[j].stride.is_multiple_of(p) {
            return;
        }
        if j + 1 == links.len() {
            *best = Some(best.map_or(p, |b| b.min(p)));
            return;
        }
        let bound = (links[j].len - 1) * links[j].stride + p;
        let next = links[j + 1].stride;
        let mut q = p;
        while q <= next {
            if q >= bound && next.is_multiple_of(q) {
                walk(links, j + 1, q, best);
            }
            q += p;
        }
    }
    if links.is_empty() {
        return Some(1);
    }
    let mut best = None;
    walk(links, 0, 1, &mut best);
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The oracle's own checks (the planner's cases live in `nest.rs`): it finds the
    /// original parent of a sliced array, and every chain's least last stride.
    #[test]
    fn the_oracle_searches_every_divisor() {
        let sliced = [(2, 4), (2, 24), (6, 36)].map(|(len, stride)| Link { len, stride });
        assert_eq!(nest(&sliced), Ok(vec![1, 6, 36]));
        assert_eq!(least_last_stride(&sliced), Some(36));
        let columns = [(3, 1), (4, 6)].map(|(len, stride)| Link { len, stride });
        assert_eq!(least_last_stride(&columns), Some(3));
        assert_eq!(divisors_at_least(36, 5).0, vec![6, 9, 12, 18, 36]);
    }
}
