//! Nesting strides into a dense parent, and the least such parent.
//!
//! Given the varying dimensions sorted by |stride| (`sⱼ`, lengths `nⱼ ≥ 2`), a dense parent
//! exists when there are parent strides `P₀ = 1 | P₁ | …` with `Pⱼ | sⱼ` (dimension `j` steps
//! by `sⱼ / Pⱼ` in parent dimension `j`) and `Pⱼ₊₁ ≥ Pⱼ + (nⱼ - 1)·sⱼ` (its range fits in that
//! parent dimension). Two chains settle whether one exists, without a search:
//!
//! - **Suffix gcds** `Pⱼ = gcd(sⱼ, …, s_last)` for `j ≥ 1`: every admissible `Pⱼ` divides
//!   this `Gⱼ`, and if any chain exists this one does. (`Gⱼ₊₁` is a multiple of `Gⱼ` above
//!   `(nⱼ - 1)·sⱼ`, which is itself a multiple of `Gⱼ`, so `Gⱼ₊₁ ≥ Gⱼ + (nⱼ - 1)·sⱼ` as soon as
//!   some admissible `Pⱼ₊₁ ≤ Gⱼ₊₁` clears `(nⱼ - 1)·sⱼ`.) `a[:, ::4, ::4]` of a 6×6×6 C-order
//!   array (sorted strides 4, 24, 36), where taking each stride fails, nests this way as
//!   `P = 1, 12, 36`: a 12×3×6 parent over the original array's 216 elements.
//! - **Tight**: `Pⱼ₊₁ = Pⱼ + (nⱼ - 1)·sⱼ`, the element span of the faster dimensions. The parent
//!   then ends exactly at the tensor's last element; summing the bounds shows that no other
//!   chain does. It is admissible when each stride is a multiple of that span.
//!
//! The tight chain is taken when admissible. Otherwise the gcd chain settles whether a parent
//! exists, and the least parent is then found among the divisors of the last stride: a parent
//! starting at the lowest element holds `(n_last - 1)·s_last + P_last` elements, so the least
//! parent is the chain with the least `P_last`. Choosing each `Pⱼ` as small as it can be is
//! not enough (a larger `P₁` can have a smaller admissible multiple), so unless a bound settles
//! it, [`lower_the_last_stride`] walks the levels keeping every reachable divisor
//! ([`super::divisors`]). What the parent then claims beyond the tensor is
//! `ViewPlan::parent_overhang`: nothing exactly when the tight chain is admissible.
//!
//! A producer chooses the strides, so the search is bounded ([`Work::PLANNER`], ~8 µs): a
//! last stride with tens of thousands of divisors would otherwise cost milliseconds per
//! import. Past the bound the planner keeps the gcd chain (or the least chain among the
//! divisors a partial factorisation forms): still a view, its parent perhaps larger than the
//! least. Real strides, products of small extents, stay far inside it.
//!
//! Every product and sum is checked: an overflow means no parent fits in 64 bits, which the
//! caller reports as "copy needed".

use super::CopyReason;
use super::divisors::{self, Exponents, MAX_PRIMES, PrimePower, Work};
use crate::dims::MAX_NDIM;

/// A varying dimension: its length (≥ 2) and |stride| (≥ 1), in elements.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Link {
    pub len: u64,
    pub stride: u64,
}

/// Writes the parent strides for `links` (sorted by stride) into `out` (one per link), or
/// says that no dense parent holds them (`out` then holds no meaning).
#[cfg(test)]
pub(crate) fn nest(links: &[Link], out: &mut [u64]) -> Result<(), CopyReason> {
    nest_with_last_step(links, out).map(|_| ())
}

/// [`nest`], returning the last link's step in its parent dim (its stride over the last parent
/// stride; 1 with no links): the search mostly finds it as a by-product, sparing the caller a
/// division. Within the planner's [`Work`]: see [`nest_within`].
pub(crate) fn nest_with_last_step(links: &[Link], out: &mut [u64]) -> Result<u64, CopyReason> {
    nest_within(links, out, Work::PLANNER).map(|nested| nested.step)
}

/// What [`nest_within`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Nested {
    /// The last link's step in its parent dim.
    pub step: u64,
    /// Whether the parent is the least (else the work ran out first, and it is the gcd chain or
    /// the least among the divisors a partial factorisation forms).
    pub least: bool,
}

/// [`nest_with_last_step`] spending at most `work` on the least parent's search. Whether a
/// parent exists is never traded: the gcd chain settles that in O(links) steps, and when the
/// search would cost more than `work`, the gcd chain (admissible, not always least) is the
/// answer.
pub(crate) fn nest_within(
    links: &[Link],
    out: &mut [u64],
    mut work: Work,
) -> Result<Nested, CopyReason> {
    debug_assert_eq!(links.len(), out.len());
    if let [first, last] = *links {
        return nest_two(first, last, out, &mut work);
    }
    if let Some(step) = tight_chain(links, out) {
        return Ok(Nested { step, least: true });
    }
    gcd_chain(links, out).ok_or(CopyReason::NoNest)?;
    let least = lower_the_last_stride(links, out, &mut work);
    let step = links
        .last()
        .map_or(1, |last| last.stride / out[links.len() - 1]);
    Ok(Nested { step, least })
}

/// Two links (a stepped 2-d view): `P = [1, d]` for the least divisor `d` of the second stride
/// that holds the first link's range. The tight chain is that divisor when admissible, and the
/// gcd chain holds exactly when the second stride does, so one scan settles all three steps.
fn nest_two(
    first: Link,
    last: Link,
    out: &mut [u64],
    work: &mut Work,
) -> Result<Nested, CopyReason> {
    let bound = (first.len - 1)
        .checked_mul(first.stride)
        .and_then(|reach| reach.checked_add(1))
        .filter(|&bound| bound <= last.stride)
        .ok_or(CopyReason::NoNest)?;
    out[0] = 1;
    if let Some((divisor, step)) = divisors::least_and_cofactor_by_scan(last.stride, bound) {
        out[1] = divisor;
        return Ok(Nested { step, least: true });
    }
    out[1] = last.stride;
    let least = lower_by_divisors(&[first, last], bound, out, work);
    Ok(Nested {
        step: last.stride / out[1],
        least,
    })
}

/// The chain that ends the parent at the tensor's last element, if admissible, and the last
/// link's step in it.
fn tight_chain(links: &[Link], out: &mut [u64]) -> Option<u64> {
    let (mut span, mut step) = (1u64, 1u64);
    for (j, link) in links.iter().enumerate() {
        // Equal in a dense tensor: no division then.
        step = 1;
        if link.stride != span {
            step = link.stride / span;
            if step * span != link.stride {
                return None;
            }
        }
        out[j] = span;
        if j + 1 < links.len() {
            span = (link.len - 1).checked_mul(link.stride)?.checked_add(span)?;
        }
    }
    Some(step)
}

/// `P₀ = 1`, `Pⱼ = gcd(sⱼ, …)`; `None` when even these do not hold the ranges.
fn gcd_chain(links: &[Link], out: &mut [u64]) -> Option<()> {
    let mut suffix = 0u64;
    for j in (1..links.len()).rev() {
        suffix = gcd(links[j].stride, suffix);
        out[j] = suffix;
    }
    if let Some(first) = out.first_mut() {
        *first = 1;
    }
    for j in 1..links.len() {
        let need = (links[j - 1].len - 1)
            .checked_mul(links[j - 1].stride)?
            .checked_add(out[j - 1])?;
        if out[j] < need {
            return None;
        }
    }
    Some(())
}

/// Replaces the gcd chain in `out` (whose last stride is the last link's) by the chain with
/// the least last stride (see the module docs), if `work` allows; returns whether `out` is then
/// the least.
///
/// `P_last` is a divisor of the last stride at least `1 + Σ (nⱼ - 1)·sⱼ` over the other links:
/// the least such divisor is a lower bound, reached at once when it is the stride itself (the
/// gcd chain is then least) or when there are two links (`P₀ = 1` divides every divisor; those
/// take [`nest_two`] and never come here).
/// A short scan finds that divisor for real strides; the rest factor the stride, and a
/// [`Lattice`] search finds the least chain.
fn lower_the_last_stride(links: &[Link], out: &mut [u64], work: &mut Work) -> bool {
    let Some((last, faster)) = links.split_last() else {
        return true;
    };
    // The gcd chain holds, so this sum neither overflows nor exceeds the last stride: it is
    // the chain's `P_last ≥ P_last-1 + (n - 1)·s ≥ …` summed, each step checked there.
    let Some(bound) = faster.iter().try_fold(1u64, |sum, link| {
        (link.len - 1).checked_mul(link.stride)?.checked_add(sum)
    }) else {
        return true;
    };
    debug_assert!(bound <= last.stride, "{links:?}");
    match divisors::least_and_cofactor_by_scan(last.stride, bound).map(|(lowest, _)| lowest) {
        Some(lowest) if lowest == last.stride => true,
        _ => lower_by_divisors(links, bound, out, work),
    }
}

/// [`lower_the_last_stride`] over the last stride's factored divisors, for what the scan left
/// open, if `work` affords the factoring and a lattice of `width × (links - 1)` cells (else
/// `out` is kept); returns whether `out` is then the least. Kept out of line: its stack
/// arrays would otherwise burden every plan's frame.
#[inline(never)]
fn lower_by_divisors(links: &[Link], bound: u64, out: &mut [u64], work: &mut Work) -> bool {
    let last = links[links.len() - 1];
    let mut primes = [PrimePower::default(); MAX_PRIMES];
    let factored = divisors::factor(last.stride, &mut primes, work);
    let primes = &primes[..factored.count];
    let width = divisors::count(primes);
    let levels = links.len() - 1;
    if !work.take((width as u64).saturating_mul(levels as u64)) {
        return false;
    }
    // A prime power (power-of-two strides: stepped views of power-of-two arrays) needs no
    // lattice: see `lower_along_powers`.
    if let [PrimePower { prime, exponent }] = *primes {
        lower_along_powers(links, bound, prime, exponent, out);
        return factored.complete;
    }
    // Small lattices (real strides') in small arrays: zeroing the large ones would cost more
    // than their search.
    const MOST: usize = Work::PLANNER.0 as usize;
    if width <= 64 {
        lower_among::<64, MAX_NDIM>(links, bound, primes, out);
    } else {
        lower_among::<MOST, { MOST / 32 + MAX_NDIM }>(links, bound, primes, out);
    }
    factored.complete
}

/// [`lower_by_divisors`] in stack arrays of `N` divisors and `WORDS` words of reachability (the
/// heap beyond them, where only the tests' unbounded oracle goes). Reachability takes
/// `links × ⌈width / 64⌉` words: at most `cells / 64 + width / 64 + links`, so `N / 32 + 32`
/// for `cells = width × (links - 1) ≤ N`.
#[inline(never)]
fn lower_among<const N: usize, const WORDS: usize>(
    links: &[Link],
    bound: u64,
    primes: &[PrimePower],
    out: &mut [u64],
) {
    let width = divisors::count(primes);
    let (mut values, mut least) = ([0u64; N], [0u64; N]);
    let (mut heap_values, mut heap_least) = (Vec::new(), Vec::new());
    let (values, least) = if width <= N {
        (&mut values[..width], &mut least[..width])
    } else {
        heap_values.resize(width, 0);
        heap_least.resize(width, 0);
        (&mut heap_values[..], &mut heap_least[..])
    };
    divisors::fill(primes, values);
    // The divisors of a partial factorisation are divisors still: the least of them is an
    // admissible parent stride, only perhaps not the least.
    let Some(lowest) = values.iter().copied().filter(|&d| d >= bound).min() else {
        return; // unreachable: the stride itself is at least `bound`
    };
    if lowest == links[links.len() - 1].stride {
        return;
    }
    if let [_, _] = links {
        (out[0], out[1]) = (1, lowest);
        return;
    }
    let words = width.div_ceil(64);
    let (mut reachable, mut heap_reachable) = ([0u64; WORDS], Vec::new());
    let reachable = if links.len() * words <= WORDS {
        &mut reachable[..links.len() * words]
    } else {
        heap_reachable.resize(links.len() * words, 0);
        &mut heap_reachable[..]
    };
    let lattice = Lattice {
        primes,
        words,
        values,
        least,
        reachable,
    };
    let mut chain = [0u64; MAX_NDIM];
    // A gcd chain is a chain over divisors of the last stride, so the search finds one too.
    if lattice.search(links, &mut chain[..links.len()]).is_some() {
        out.copy_from_slice(&chain[..links.len()]);
    }
}

/// [`lower_among`] for divisors `pᵉ` (`e ≤ exponent`) of one prime, in closed form. They divide
/// one another in the order of their size, so the least reached divisor below each is the least
/// reached at all, `p^lo`, and the next level reaches exactly the `e` from the least with
/// `pᵉ ≥ p^lo + (nⱼ - 1)·sⱼ` up to the largest dividing `sⱼ₊₁`: the least chain is the least
/// of each level, the one [`Lattice::search`] walks back down.
fn lower_along_powers(links: &[Link], bound: u64, prime: u64, exponent: u32, out: &mut [u64]) {
    // pᵉ divides the last stride for every e ≤ exponent: no power overflows.
    let power = |e: u32| prime.pow(e);
    let least_from = |from: u32, at_least: u64| (from..=exponent).find(|&e| power(e) >= at_least);
    let Some(lowest) = least_from(0, bound) else {
        return; // unreachable: the stride itself is at least `bound`
    };
    if power(lowest) == links[links.len() - 1].stride {
        return;
    }
    if let [_, _] = links {
        (out[0], out[1]) = (1, power(lowest));
        return;
    }
    let mut chain = [0u64; MAX_NDIM];
    let mut e = 0;
    chain[0] = 1;
    for j in 0..links.len() - 1 {
        let Some(need) = (links[j].len - 1)
            .checked_mul(links[j].stride)
            .and_then(|reach| reach.checked_add(power(e)))
        else {
            return;
        };
        let Some(next) = least_from(e, need) else {
            return; // unreachable: the gcd chain's next stride is such a power (see below)
        };
        // By induction `pᵉ` is at most the gcd chain's `Pⱼ` (which the caller's `out` holds):
        // the least power holding this level's range is then at most its `Pⱼ₊₁`, a power of
        // `p` that divides `sⱼ₊₁`, so it divides `sⱼ₊₁` too.
        debug_assert!(links[j + 1].stride.is_multiple_of(power(next)), "{links:?}");
        e = next;
        chain[j + 1] = power(e);
    }
    out.copy_from_slice(&chain[..links.len()]);
}

/// The divisors of the last stride and, per level, which of them a chain reaches (bitsets of
/// `values.len()` bits, one after the other).
struct Lattice<'a> {
    primes: &'a [PrimePower],
    /// 64-bit words per level in `reachable`.
    words: usize,
    values: &'a mut [u64],
    least: &'a mut [u64],
    reachable: &'a mut [u64],
}

impl Lattice<'_> {
    fn reached(&self, level: usize, index: usize) -> bool {
        self.reachable[level * self.words + index / 64] >> (index % 64) & 1 == 1
    }

    fn reach(&mut self, level: usize, index: usize) {
        let word = level * self.words + index / 64;
        self.reachable[word] |= 1 << (index % 64);
    }

    /// The least chain into `out`, `values` holding the divisors (see [`lower_the_last_stride`]).
    fn search(mut self, links: &[Link], out: &mut [u64]) -> Option<()> {
        let (width, primes) = (self.values.len(), self.primes);
        self.reach(0, 0); // P₀ = 1
        for j in 0..links.len() - 1 {
            self.least_reachable_divisors(j);
            let reach = (links[j].len - 1).checked_mul(links[j].stride)?;
            let bound = Exponents::dividing(links[j + 1].stride, primes);
            let mut exponents = Exponents::default();
            for i in 0..width {
                let fits = self.least[i]
                    .checked_add(reach)
                    .is_some_and(|need| need <= self.values[i]);
                if fits && exponents.at_most(&bound, primes.len()) {
                    self.reach(j + 1, i);
                }
                exponents.advance(primes);
            }
        }
        let last = links.len() - 1;
        let mut above = (0..width)
            .filter(|&i| self.reached(last, i))
            .min_by_key(|&i| self.values[i])?;
        out[last] = self.values[above];
        for j in (0..last).rev() {
            let bound = Exponents::of_index(above, primes);
            let mut exponents = Exponents::default();
            let mut below = None;
            for i in 0..width {
                if self.reached(j, i) && exponents.at_most(&bound, primes.len()) {
                    below = Some(i);
                    break;
                }
                exponents.advance(primes);
            }
            above = below?;
            out[j] = self.values[above];
            // Every divisor reached here fits below `P_j+1`: it divides `s_j`, hence the reach
            // `(n_j - 1)·s_j` (checked on the way up), and `P_j+1`, which exceeds the reach (one
            // fitted on the way up), so `P_j+1 ≥ reach + P_j`.
            debug_assert!(out[j] + (links[j].len - 1) * links[j].stride <= out[j + 1]);
        }
        Some(())
    }

    /// `least[i]`: the least divisor reached at `level` that divides `values[i]`.
    fn least_reachable_divisors(&mut self, level: usize) {
        for i in 0..self.values.len() {
            self.least[i] = if self.reached(level, i) {
                self.values[i]
            } else {
                u64::MAX
            };
        }
        let mut radix = 1;
        for prime in self.primes {
            let block = radix * (prime.exponent as usize + 1);
            for start in (0..self.values.len()).step_by(block) {
                for i in start + radix..start + block {
                    self.least[i] = self.least[i].min(self.least[i - radix]);
                }
            }
            radix = block;
        }
    }
}

/// Binary (Stein's) gcd; `gcd(a, 0) = a`. Shifts and subtractions only (a 64-bit division
/// costs tens of cycles): at most ~128 steps for 64-bit values, a handful for real strides.
fn gcd(mut a: u64, mut b: u64) -> u64 {
    if a == 0 || b == 0 {
        return a | b;
    }
    let shift = (a | b).trailing_zeros();
    a >>= a.trailing_zeros();
    loop {
        b >>= b.trailing_zeros();
        if a > b {
            (a, b) = (b, a);
        }
        b -= a;
        if b == 0 {
            return a << shift;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links(pairs: &[(u64, u64)]) -> Vec<Link> {
        pairs
            .iter()
            .map(|&(len, stride)| Link { len, stride })
            .collect()
    }

    fn nest(links: &[Link]) -> Result<Vec<u64>, CopyReason> {
        let mut out = vec![0; links.len()];
        super::nest(links, &mut out).map(|()| out)
    }

    #[test]
    fn dense_strides_nest_as_themselves() {
        assert_eq!(
            nest(&links(&[(4, 1), (3, 4), (2, 12)])).unwrap(),
            [1, 4, 12]
        );
    }

    #[test]
    fn sliced_strides_find_a_parent_where_the_strides_themselves_fail() {
        // a[:, ::4, ::4] of a 6×6×6 C-order array, sorted by stride: 24 does not divide 36.
        assert_eq!(
            nest(&links(&[(2, 4), (2, 24), (6, 36)])).unwrap(),
            [1, 12, 36]
        );
    }

    #[test]
    fn the_tight_chain_wins_when_admissible() {
        // a[:, :3] of a 4×6 C-order array: strides (1, 6); a 3-wide parent ends at the last
        // element (parent 3×7, step 2), where the stride itself would claim 3 elements more.
        assert_eq!(nest(&links(&[(3, 1), (4, 6)])).unwrap(), [1, 3]);
        // a[:, 3:5] of 2×5: 5 is not a multiple of 2, so the parent is 5 wide.
        assert_eq!(nest(&links(&[(2, 1), (2, 5)])).unwrap(), [1, 5]);
    }

    #[test]
    fn tight_chains_are_taken_without_any_search() {
        // The tight chain is the least whenever admissible, so the search would find it too:
        // it is taken first, with no work at all (here the search needs some, and without it
        // the gcd chain would stand), and the last link's span is never formed (it overflows
        // in the first).
        for (pairs, tight) in [
            (&[(2, 1), (2, 2), (5, 1 << 62)][..], &[1, 2, 4][..]),
            (&[(3, 1), (4, 3), (2, 24)][..], &[1, 3, 12][..]),
        ] {
            let links = links(pairs);
            let mut out = vec![0; links.len()];
            let nested = nest_within(&links, &mut out, Work(0)).unwrap();
            assert_eq!((&out[..], nested.least), (tight, true), "{pairs:?}");
            let last = links[links.len() - 1];
            assert_eq!(nested.step, last.stride / tight[tight.len() - 1]);
        }
    }

    #[test]
    fn a_gcd_chain_the_scan_shows_least_is_kept_without_any_search() {
        // Not tight (3 is not a multiple of 2); the least divisor of 9 from 1 + 1 + 3 up is 9.
        let links = links(&[(2, 1), (2, 3), (2, 9)]);
        let mut out = [0; 3];
        let nested = nest_within(&links, &mut out, Work(0)).unwrap();
        assert_eq!(
            (out, nested),
            (
                [1, 3, 9],
                Nested {
                    step: 1,
                    least: true
                }
            )
        );
    }

    #[test]
    fn the_last_stride_is_lowered_when_it_can_be() {
        // Not tight (6 is not a multiple of 1 + 2·2 = 5) but 6 = 3·2 nests with P₁ = 6,
        // then P₂ ≥ 6 + 12 = 18: 18 divides 36, so the parent stops there, not at 36.
        assert_eq!(
            nest(&links(&[(3, 2), (3, 6), (2, 36)])).unwrap(),
            [1, 6, 18]
        );
    }

    #[test]
    fn the_least_parent_is_found_among_the_last_strides_divisors() {
        // np.arange(18.).reshape(2, 9)[:, :2]: a 3-wide parent (steps 1 and 3) ends one element
        // past the tensor, where the stride 9 itself would claim seven.
        assert_eq!(nest(&links(&[(2, 1), (2, 9)])).unwrap(), [1, 3]);
        // Not tight: 3 is not a multiple of the span 2 (a chain spanning `len` instead of
        // `len - 1` steps would take 3 and then 9).
        assert_eq!(nest(&links(&[(2, 1), (2, 3), (2, 18)])).unwrap(), [1, 3, 6]);
        // The smallest admissible P₁ (2) only has 18 above 6 + 1; a larger one (3) has 9.
        assert_eq!(
            nest(&links(&[(2, 1), (2, 6), (2, 18)])).unwrap(),
            [1, 3, 9],
            "greedy would give [1, 2, 18]"
        );
    }

    #[test]
    fn overlapping_and_non_nesting_strides_do_not() {
        assert_eq!(
            nest(&links(&[(3, 1), (2, 2)])),
            Err(CopyReason::NoNest),
            "overlap"
        );
        assert_eq!(
            nest(&links(&[(2, 2), (2, 3)])).unwrap(),
            [1, 3],
            "parent 3×2, steps 2 and 1"
        );
        assert_eq!(
            nest(&links(&[(3, 2), (2, 3)])),
            Err(CopyReason::NoNest),
            "disjoint but interleaved: 0 2 4 / 3 5 7"
        );
        assert_eq!(
            nest(&links(&[(2, 1), (2, 1)])),
            Err(CopyReason::NoNest),
            "equal strides"
        );
    }

    #[test]
    fn two_links_nest_as_the_exhaustive_search_does_with_the_last_step() {
        // Strides up to 700 put some least divisors beyond the scan's reach, on to factoring.
        for len in 2..5 {
            for first in 1..24 {
                for second in first..700 {
                    let links = links(&[(len, first), (3, second)]);
                    let mut out = [0; 2];
                    let found = nest_with_last_step(&links, &mut out).map(|step| (out, step));
                    let expected = super::super::exhaustive::nest(&links)
                        .map(|p| ([p[0], p[1]], second / p[1]))
                        .map_err(|_| CopyReason::NoNest);
                    assert_eq!(found, expected, "{links:?}");
                }
            }
        }
    }

    /// Whether `parents` is an admissible chain for `links` (see the module docs).
    fn admissible(links: &[Link], parents: &[u64]) -> bool {
        parents.first() == Some(&1)
            && links.iter().zip(parents).all(|(l, &p)| l.stride % p == 0)
            && links
                .windows(2)
                .zip(parents.windows(2))
                .all(|(l, p)| p[1] % p[0] == 0 && p[1] >= p[0] + (l[0].len - 1) * l[0].stride)
    }

    /// Every sorted layout of `count` links with lengths 2..=3 and strides 1..=`most`, by
    /// [`nest_within`] with the planner's work against the exhaustive search: a parent exactly
    /// when it finds one, admissible, with the least last stride, and never bounded.
    fn agree_with_the_exhaustive_search(count: usize, most: u64) -> usize {
        let mut strides = vec![1u64; count];
        let mut checked = 0;
        loop {
            for lens in 0..1usize << count {
                let links: Vec<Link> = (0..count)
                    .map(|j| Link {
                        len: 2 + (lens >> j & 1) as u64,
                        stride: strides[j],
                    })
                    .collect();
                let mut out = vec![0; count];
                let found = nest_within(&links, &mut out, Work::PLANNER);
                let least = super::super::exhaustive::least_last_stride(&links);
                match found {
                    Ok(nested) => {
                        assert!(admissible(&links, &out), "{links:?}: {out:?}");
                        assert_eq!(Some(out[count - 1]), least, "{links:?}: {out:?}");
                        assert!(nested.least, "bounded: {links:?}");
                        assert_eq!(nested.step * out[count - 1], strides[count - 1]);
                    }
                    Err(_) => assert_eq!(least, None, "{links:?}"),
                }
                checked += 1;
            }
            // The next non-decreasing stride tuple.
            let Some(j) = (0..count).rev().find(|&j| strides[j] < most) else {
                return checked;
            };
            strides[j] += 1;
            for k in j + 1..count {
                strides[k] = strides[j];
            }
        }
    }

    #[test]
    fn three_and_four_links_nest_as_the_exhaustive_search_does() {
        assert_eq!(agree_with_the_exhaustive_search(3, 40), 11_480 * 8);
        assert_eq!(agree_with_the_exhaustive_search(4, 18), 5_985 * 16);
    }

    /// Layouts whose last stride is a power of one prime, each nested by the lattice search
    /// (`lower_among`) and in closed form (`lower_along_powers`) from the same gcd chain.
    #[test]
    fn prime_powers_nest_as_the_lattice_search_does() {
        let mut compared = 0;
        for (prime, most) in [(2u64, 10u32), (3, 6), (5, 4), (7, 3)] {
            for exponent in 1..=most {
                let last = prime.pow(exponent);
                // Faster strides: every sorted pair and triple of divisors and non-divisors of
                // the last stride below it, lengths 2 to 4.
                for count in 2..=4usize {
                    let faster = count - 1;
                    let mut strides = vec![1u64; faster];
                    loop {
                        for lens in 0..3usize.pow(count as u32) {
                            let mut pairs: Vec<(u64, u64)> = (0..faster)
                                .map(|j| (2 + (lens / 3usize.pow(j as u32) % 3) as u64, strides[j]))
                                .collect();
                            pairs.push((2 + (lens / 3usize.pow(faster as u32) % 3) as u64, last));
                            let links = links(&pairs);
                            let mut gcds = vec![0; count];
                            if gcd_chain(&links, &mut gcds).is_none() {
                                continue;
                            }
                            let bound = links[..faster]
                                .iter()
                                .fold(1, |sum, l| sum + (l.len - 1) * l.stride);
                            let primes = [PrimePower { prime, exponent }];
                            let (mut searched, mut closed) = (gcds.clone(), gcds.clone());
                            lower_among::<64, MAX_NDIM>(&links, bound, &primes, &mut searched);
                            lower_along_powers(&links, bound, prime, exponent, &mut closed);
                            assert_eq!(closed, searched, "{links:?}");
                            compared += 1;
                        }
                        let Some(j) = (0..faster).rev().find(|&j| strides[j] < last.min(40)) else {
                            break;
                        };
                        strides[j] += 1;
                        for k in j + 1..faster {
                            strides[k] = strides[j];
                        }
                    }
                }
            }
        }
        assert!(compared > 10_000, "{compared} layouts compared");
    }

    #[test]
    fn lattices_beyond_the_small_arrays_are_searched_whole() {
        // 2162160 = 2⁴·3³·5·7·11·13: 320 divisors, past the 64 of the small arrays.
        assert_eq!(
            nest(&links(&[(2, 1), (2, 3), (2, 2162160)])).unwrap(),
            [1, 3, 6]
        );
        let four = links(&[(2, 1), (2, 3), (2, 720), (2, 2162160)]);
        let mut out = [0; 4];
        let nested = nest_within(&four, &mut out, Work::PLANNER).unwrap();
        assert!(nested.least && admissible(&four, &out), "{out:?}");
        let least = super::super::exhaustive::least_last_stride(&four);
        assert_eq!((out, least), ([1, 3, 6, 756], Some(756)));
    }

    #[test]
    fn the_work_bound_trades_minimality_only_beyond_it() {
        // Issue 30's layouts: lattices of 80640 and 14400 divisors over 7 and 3 levels, far
        // past the planner's 1024 cells. The gcd chain then stands: admissible, not least.
        let issue = [
            links(&[
                (2, 3),
                (2, 6),
                (3, 18),
                (3, 90),
                (3, 2700),
                (3, 10800),
                (2, 324000),
                (2, 224403121196654400),
            ]),
            links(&[
                (2, 3),
                (2, 486096),
                (2, 103340120832),
                (2, 65685564303840000),
            ]),
            // Two 30-bit primes p > q: Pollard's rho cannot split them within the work, so
            // only 1, 3, pq and 3pq are searched, where 3q is least.
            links(&[(2, 1), (2, 3), (2, 3 * 1073741789 * 1073741783)]),
        ];
        for links in &issue {
            let (mut bounded, mut least) = (vec![0; links.len()], vec![0; links.len()]);
            let found = nest_within(links, &mut bounded, Work::PLANNER).unwrap();
            let exact = nest_within(links, &mut least, Work::UNBOUNDED).unwrap();
            assert!(!found.least && exact.least, "{links:?}");
            assert!(admissible(links, &bounded) && admissible(links, &least));
            let last = links.len() - 1;
            assert!(bounded[last] > least[last], "{bounded:?} against {least:?}");
        }
    }

    #[test]
    fn binary_gcd_agrees_with_euclid() {
        fn euclid(mut a: u64, mut b: u64) -> u64 {
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a
        }
        let values = [
            0,
            1,
            2,
            3,
            12,
            18,
            36,
            60,
            1 << 40,
            3 << 40,
            u64::MAX,
            u64::MAX - 1,
        ];
        for a in values {
            for b in values {
                assert_eq!(gcd(a, b), euclid(a, b), "gcd({a}, {b})");
            }
        }
    }

    #[test]
    fn extreme_values_fail_without_overflow() {
        assert_eq!(
            nest(&links(&[(u64::MAX, u64::MAX), (2, u64::MAX)])),
            Err(CopyReason::NoNest)
        );
        assert_eq!(nest(&links(&[(2, 1 << 63)])).unwrap(), [1]);
    }
}
