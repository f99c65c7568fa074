//! Nesting strides into a dense parent, in O(ndim) steps whatever the extents.
//!
//! Given the varying dimensions sorted by |stride| (`sⱼ`, lengths `nⱼ ≥ 2`), a dense parent
//! exists when there are parent strides `P₀ = 1 | P₁ | …` with `Pⱼ | sⱼ` (dimension `j` steps
//! by `sⱼ / Pⱼ` in parent dimension `j`) and `Pⱼ₊₁ ≥ Pⱼ + (nⱼ - 1)·sⱼ` (its range fits in that
//! parent dimension). Two choices settle every case without a search:
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
//! The tight chain is taken when admissible, else the gcd chain, whose last stride is lowered
//! to the smallest admissible multiple of `P_{last-1}` when that divides `s_last`. What the
//! parent then claims beyond the tensor is [`super::ViewPlan::parent_overhang`].
//!
//! Every product and sum is checked: an overflow means no parent fits in 64 bits, which the
//! caller reports as "copy needed".

/// A varying dimension: its length (≥ 2) and |stride| (≥ 1), in elements.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Link {
    pub len: u64,
    pub stride: u64,
}

/// Why no parent was found.
pub(crate) const NO_NEST: &str = "the strides overlap or do not nest into one array";

/// Writes the parent strides for `links` (sorted by stride) into `out` (one per link), or
/// says why no dense parent holds them (`out` then holds no meaning).
pub(crate) fn nest(links: &[Link], out: &mut [u64]) -> Result<(), &'static str> {
    debug_assert_eq!(links.len(), out.len());
    if tight_chain(links, out).is_some() {
        return Ok(());
    }
    gcd_chain(links, out).ok_or(NO_NEST)?;
    if let [.., before, last] = *links {
        let k = links.len() - 1;
        let below = out[k - 1];
        let lowest = (before.len - 1)
            .checked_mul(before.stride)
            .and_then(|reach| reach.checked_add(below))
            .and_then(|bound| bound.div_ceil(below).checked_mul(below));
        if let Some(lowest) = lowest.filter(|&p| last.stride.is_multiple_of(p)) {
            out[k] = lowest;
        }
    }
    Ok(())
}

/// The chain that ends the parent at the tensor's last element, if admissible.
fn tight_chain(links: &[Link], out: &mut [u64]) -> Option<()> {
    let mut span = 1u64;
    for (j, link) in links.iter().enumerate() {
        // Equal in a dense tensor: no division then.
        if link.stride != span && !link.stride.is_multiple_of(span) {
            return None;
        }
        out[j] = span;
        if j + 1 < links.len() {
            span = (link.len - 1).checked_mul(link.stride)?.checked_add(span)?;
        }
    }
    Some(())
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

    fn nest(links: &[Link]) -> Result<Vec<u64>, &'static str> {
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
    fn the_last_stride_is_lowered_when_it_can_be() {
        // Not tight (6 is not a multiple of 1 + 2·2 = 5) but 6 = 3·2 nests with P₁ = 6,
        // then P₂ ≥ 6 + 12 = 18: 18 divides 36, so the parent stops there, not at 36.
        assert_eq!(
            nest(&links(&[(3, 2), (3, 6), (2, 36)])).unwrap(),
            [1, 6, 18]
        );
    }

    #[test]
    fn overlapping_and_non_nesting_strides_do_not() {
        assert_eq!(nest(&links(&[(3, 1), (2, 2)])), Err(NO_NEST), "overlap");
        assert_eq!(
            nest(&links(&[(2, 2), (2, 3)])).unwrap(),
            [1, 3],
            "parent 3×2, steps 2 and 1"
        );
        assert_eq!(
            nest(&links(&[(3, 2), (2, 3)])),
            Err(NO_NEST),
            "disjoint but interleaved: 0 2 4 / 3 5 7"
        );
        assert_eq!(
            nest(&links(&[(2, 1), (2, 1)])),
            Err(NO_NEST),
            "equal strides"
        );
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
            Err(NO_NEST)
        );
        assert_eq!(nest(&links(&[(2, 1 << 63)])).unwrap(), [1]);
    }
}
