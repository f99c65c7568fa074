//! The divisors of a 64-bit stride, for the least parent search ([`super::nest`]).
//!
//! The least divisor above a bound is first sought by a short scan ([`least_by_scan`]), which
//! settles the slices and steps of real arrays without factoring anything.
//! A stride is factored by trial division of its small primes (multiplications by their
//! inverses), and whatever large cofactor remains by Pollard's rho in Brent's form, within a
//! work budget ([`Work`]) shared with the search: real strides are products of small extents
//! and stop after a few trials; a hostile one (two 30-bit primes) keeps a composite factor
//! whole, and the search then finds the least parent among the divisors it can form.

/// Candidates [`least_by_scan`] tries each way before it gives up.
const SCAN_STEPS: u64 = 8;

/// The least divisor of `n` that is at least `bound` (`1 ≤ bound ≤ n`), when a few divisions
/// find it; `None` when they do not (factor `n` then).
#[cfg(test)]
pub(crate) fn least_by_scan(n: u64, bound: u64) -> Option<u64> {
    least_and_cofactor_by_scan(n, bound).map(|(divisor, _)| divisor)
}

/// [`least_by_scan`] with the divisor's cofactor `n / divisor`, which each successful trial
/// division yields anyway and the caller would otherwise divide again for.
pub(crate) fn least_and_cofactor_by_scan(n: u64, bound: u64) -> Option<(u64, u64)> {
    debug_assert!(1 <= bound && bound <= n);
    // Every divisor below `n` is at most `n / 2`.
    if bound > n / 2 {
        return Some((n, 1));
    }
    // A power of two (the commonest row length) has only powers of two for divisors: the
    // least one from `bound` up is `bound`'s next, at most `n`. No division.
    if n.is_power_of_two() {
        let divisor = bound.next_power_of_two();
        return Some((divisor, n >> divisor.trailing_zeros()));
    }
    // A divisor `d ≥ bound` has the cofactor `n / d ≤ most`; the least has the largest. Scanning
    // divisors up from `bound` and cofactors down from `most` in turn, the first hit either way
    // is the least divisor.
    let most = n / bound;
    // `bound` itself (a tight parent) is settled by the division that gave `most`.
    if most * bound == n {
        return Some((bound, most));
    }
    for i in 0..SCAN_STEPS.min(most - 1) {
        let (up, down) = (bound + i, most - i);
        if i > 0 {
            let cofactor = n / up;
            if cofactor * up == n {
                return Some((up, cofactor));
            }
        }
        let divisor = n / down;
        if divisor * down == n {
            return Some((divisor, down));
        }
    }
    // Every cofactor from `most` down to 2 failed: only `n` itself is left.
    (most - 1 <= SCAN_STEPS).then_some((n, 1))
}

/// A prime factor and its exponent (or, where the work ran out, a factor [`factor`] could not
/// split: see there).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PrimePower {
    pub prime: u64,
    pub exponent: u32,
}

/// More distinct primes than any 64-bit value has (the product of the first 16 exceeds 2⁶⁴).
pub(crate) const MAX_PRIMES: usize = 15;

/// Trial division stops below this; a cofactor below its square is prime.
const TRIAL_LIMIT: u64 = 1 << 10;

/// The odd primes below [`TRIAL_LIMIT`].
const TRIAL_PRIMES: usize = 171;

/// An odd prime with its inverse modulo 2⁶⁴ and `⌊(2⁶⁴ - 1) / prime⌋`: `n` is a multiple of
/// `prime` exactly when `n · inverse` (wrapping) is at most that, and is then `n / prime` —
/// one multiplication where a 64-bit division costs tens of cycles.
#[derive(Clone, Copy)]
struct TrialPrime {
    prime: u64,
    inverse: u64,
    most: u64,
}

static TRIAL: [TrialPrime; TRIAL_PRIMES] = trial_primes();

const fn trial_primes() -> [TrialPrime; TRIAL_PRIMES] {
    let mut out = [TrialPrime {
        prime: 0,
        inverse: 0,
        most: 0,
    }; TRIAL_PRIMES];
    let (mut count, mut candidate) = (0, 3u64);
    while candidate < TRIAL_LIMIT {
        let mut d = 3;
        while d * d <= candidate && candidate % d != 0 {
            d += 2;
        }
        if d * d > candidate {
            // Newton's iteration doubles the correct low bits; an odd value is its own
            // inverse modulo 8, so five steps reach 64 bits.
            let mut inverse = candidate;
            let mut step = 0;
            while step < 5 {
                inverse = inverse.wrapping_mul(2u64.wrapping_sub(candidate.wrapping_mul(inverse)));
                step += 1;
            }
            out[count] = TrialPrime {
                prime: candidate,
                inverse,
                most: u64::MAX / candidate,
            };
            count += 1;
        }
        candidate += 2;
    }
    assert!(count == TRIAL_PRIMES);
    out
}

/// What the factoring and the least-parent search may spend, in units of about 8 ns on this
/// kind of machine (a divisor of the lattice searched at one level, or half a step of
/// Pollard's rho): with trial division, planning any layout then stays near 10 µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Work(pub u32);

impl Work {
    /// The planner's budget: lattices of up to 1024 divisor-levels (2162160's 320 divisors
    /// over three links, say) and factors up to ~2¹⁶ beyond trial division are searched whole.
    pub(crate) const PLANNER: Self = Self(1024);

    /// No bound: factors are proven prime (Miller–Rabin: some 800 multiplications, which a
    /// bounded budget never affords) and every lattice is searched. For the tests' oracle.
    #[cfg(test)]
    pub(crate) const UNBOUNDED: Self = Self(u32::MAX);

    fn is_unbounded(self) -> bool {
        self.0 == u32::MAX
    }

    /// Takes `units`, if that many are left.
    pub(crate) fn take(&mut self, units: u64) -> bool {
        if self.is_unbounded() {
            return true;
        }
        match u32::try_from(units)
            .ok()
            .and_then(|u| self.0.checked_sub(u))
        {
            Some(left) => {
                self.0 = left;
                true
            }
            None => false,
        }
    }
}

/// A factorisation, primes ascending, and whether it is complete. When `work` runs out before
/// Pollard's rho splits what trial division left, that cofactor is kept whole as one factor:
/// a prime, or a composite all of whose primes exceed [`TRIAL_LIMIT`] and which is coprime to
/// every other factor, so that the divisors [`fill`] forms from the list are still divisors
/// (only not all of them) and [`Exponents::dividing`] still tests divisibility by them.
pub(crate) struct Factored {
    pub count: usize,
    /// Every factor is known to be prime (or below the square of [`TRIAL_LIMIT`]).
    pub complete: bool,
}

/// The prime factorisation of `n ≥ 1` into `out`, within `work` (see [`Factored`]).
pub(crate) fn factor(mut n: u64, out: &mut [PrimePower; MAX_PRIMES], work: &mut Work) -> Factored {
    debug_assert!(n >= 1);
    let mut count = 0;
    let push = |prime: u64,
                exponent: u32,
                out: &mut [PrimePower; MAX_PRIMES],
                count: &mut usize| {
        match out[..*count].iter_mut().find(|p| p.prime == prime) {
            Some(existing) => existing.exponent += exponent,
            None => {
                out[*count] = PrimePower { prime, exponent };
                *count += 1;
            }
        }
    };
    let twos = n.trailing_zeros();
    if twos > 0 {
        push(2, twos, out, &mut count);
        n >>= twos;
    }
    for trial in &TRIAL {
        if trial.prime * trial.prime > n {
            break;
        }
        let mut exponent = 0;
        loop {
            let quotient = n.wrapping_mul(trial.inverse);
            if quotient > trial.most {
                break;
            }
            n = quotient;
            exponent += 1;
        }
        if exponent > 0 {
            push(trial.prime, exponent, out, &mut count);
        }
    }
    // What Pollard's rho could not split, multiplied together: one factor, coprime to the rest
    // once the primes it found are divided out of it.
    let mut unsplit = 1u64;
    if n > 1 {
        let mut stack = [0u64; 64];
        let mut depth = 0;
        stack[0] = n;
        depth += 1;
        while depth > 0 {
            depth -= 1;
            let m = stack[depth];
            if m < TRIAL_LIMIT * TRIAL_LIMIT || (work.is_unbounded() && is_prime(m)) {
                push(m, 1, out, &mut count);
            } else if let Some(split) = pollard_brent(m, work) {
                stack[depth] = split;
                stack[depth + 1] = m / split;
                depth += 2;
            } else {
                unsplit *= m; // a product of factors of n
            }
        }
    }
    if unsplit > 1 {
        for p in &mut out[..count] {
            while unsplit.is_multiple_of(p.prime) {
                unsplit /= p.prime;
                p.exponent += 1;
            }
        }
    }
    if unsplit > 1 {
        push(unsplit, 1, out, &mut count);
    }
    out[..count].sort_unstable_by_key(|p| p.prime);
    Factored {
        count,
        complete: unsplit == 1,
    }
}

fn mul_mod(a: u64, b: u64, m: u64) -> u64 {
    (u128::from(a) * u128::from(b) % u128::from(m)) as u64
}

fn pow_mod(mut base: u64, mut exponent: u64, m: u64) -> u64 {
    let mut result = 1 % m;
    base %= m;
    while exponent > 0 {
        if exponent & 1 == 1 {
            result = mul_mod(result, base, m);
        }
        base = mul_mod(base, base, m);
        exponent >>= 1;
    }
    result
}

/// Deterministic Miller–Rabin for odd `n` with no factor below [`TRIAL_LIMIT`]: only where the
/// work is unbounded (a bounded factoring needs no primality test, see [`Factored`]).
fn is_prime(n: u64) -> bool {
    let odd = n - 1;
    let shift = odd.trailing_zeros();
    let d = odd >> shift;
    [2u64, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37]
        .iter()
        .all(|&a| {
            let mut x = pow_mod(a, d, n);
            if x == 1 || x == n - 1 {
                return true;
            }
            for _ in 1..shift {
                x = mul_mod(x, x, n);
                if x == n - 1 {
                    return true;
                }
            }
            false
        })
}

/// A nontrivial factor of the odd `n` (Pollard's rho, Brent's cycle finding), unless `work`
/// runs out first, as it does for a prime `n`: two units a step.
fn pollard_brent(n: u64, work: &mut Work) -> Option<u64> {
    for c in 1..n {
        let step = |x: u64| (mul_mod(x, x, n) + c) % n;
        let (mut x, mut y, mut product) = (2u64, 2u64, 1u64);
        let mut power = 1u64;
        let mut steps = 0u64;
        loop {
            if !work.take(2) {
                return None;
            }
            if steps == power {
                x = y;
                power <<= 1;
                steps = 0;
            }
            y = step(y);
            steps += 1;
            product = mul_mod(product, x.abs_diff(y), n);
            if steps.is_multiple_of(64) || product == 0 {
                let g = gcd(if product == 0 { x.abs_diff(y) } else { product }, n);
                if g == n {
                    break; // this constant cycles without splitting: try the next
                }
                if g > 1 {
                    return Some(g);
                }
            }
        }
    }
    None
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// How many divisors `∏ primesᵢ^exponentᵢ` has.
pub(crate) fn count(primes: &[PrimePower]) -> usize {
    primes.iter().map(|p| p.exponent as usize + 1).product()
}

/// Writes the divisors of `∏ primesᵢ^exponentᵢ` into `out` (of length [`count`]) in
/// mixed-radix order: the divisor at index `Σ eᵢ·radixᵢ` (`radixᵢ = ∏_{k<i} (exponentₖ + 1)`)
/// is `∏ primesᵢ^eᵢ`, so index 0 holds 1 and [`Exponents`] walks the indices in order.
pub(crate) fn fill(primes: &[PrimePower], out: &mut [u64]) {
    out[0] = 1;
    let mut block = 1;
    for p in primes {
        let mut power = 1u64;
        for e in 1..=p.exponent as usize {
            power *= p.prime;
            for k in 0..block {
                out[e * block + k] = out[k] * power;
            }
        }
        block *= p.exponent as usize + 1;
    }
}

/// The exponent vector of a divisor index, advanced index by index (no division).
#[derive(Clone, Copy, Default)]
pub(crate) struct Exponents([u32; MAX_PRIMES]);

impl Exponents {
    /// The exponents of `n`'s factors among `primes`, each capped at the prime's exponent: the
    /// divisors of `∏ primesᵢ^exponentᵢ` that divide `n` are those at or below them.
    pub(crate) fn dividing(mut n: u64, primes: &[PrimePower]) -> Self {
        let mut out = Self::default();
        for (k, p) in primes.iter().enumerate() {
            let mut e = 0;
            if p.prime == 2 {
                e = n.trailing_zeros().min(p.exponent);
            } else {
                while e < p.exponent && n.is_multiple_of(p.prime) {
                    n /= p.prime;
                    e += 1;
                }
            }
            out.0[k] = e;
        }
        out
    }

    /// The exponents of the divisor at `index` (see [`fill`]).
    pub(crate) fn of_index(mut index: usize, primes: &[PrimePower]) -> Self {
        let mut out = Self::default();
        for (k, p) in primes.iter().enumerate() {
            let extent = p.exponent as usize + 1;
            out.0[k] = (index % extent) as u32;
            index /= extent;
        }
        out
    }

    /// Whether every exponent is at most `bound`'s (the divisor divides `bound`'s).
    pub(crate) fn at_most(&self, bound: &Self, primes: usize) -> bool {
        self.0[..primes].iter().zip(&bound.0).all(|(e, b)| e <= b)
    }

    /// Moves to the next index's exponents.
    pub(crate) fn advance(&mut self, primes: &[PrimePower]) {
        for (e, p) in self.0.iter_mut().zip(primes) {
            if *e < p.exponent {
                *e += 1;
                return;
            }
            *e = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn factors_within(n: u64, mut work: Work) -> (Vec<(u64, u32)>, bool) {
        let mut out = [PrimePower {
            prime: 0,
            exponent: 0,
        }; MAX_PRIMES];
        let found = factor(n, &mut out, &mut work);
        let list = out[..found.count].iter().map(|p| (p.prime, p.exponent));
        (list.collect(), found.complete)
    }

    fn factors(n: u64) -> Vec<(u64, u32)> {
        let (list, complete) = factors_within(n, Work::UNBOUNDED);
        assert!(complete, "{n}");
        list
    }

    #[test]
    fn factorisations_multiply_back_and_hold_primes_only() {
        let values = [
            1,
            2,
            12,
            36,
            1 << 63,
            1009 * 1013,
            1_000_003 * 1_000_033,
            4_294_967_291 * 4_294_967_279,
            18_446_744_073_709_551_557, // the largest 64-bit prime
            614_889_782_588_491_410,    // the primes up to 47
            3 * 5 * 1_000_003 * 1_000_003,
        ];
        for n in values {
            let found = factors(n);
            let product = found
                .iter()
                .fold(1u128, |acc, &(p, e)| acc * u128::from(p).pow(e));
            assert_eq!(product, u128::from(n), "{n}: {found:?}");
            for (p, _) in found {
                let prime = if p < 1 << 40 {
                    (2..).take_while(|d| d * d <= p).all(|d| p % d != 0)
                } else {
                    is_prime(p)
                };
                assert!(p >= 2 && prime, "{p} of {n}");
            }
        }
        assert_eq!(factors(360), [(2, 3), (3, 2), (5, 1)]);
    }

    #[test]
    fn bounded_factoring_keeps_what_it_cannot_split_whole_and_coprime() {
        let planner = |n| factors_within(n, Work::PLANNER);
        // Real strides: trial division and a short rho (primes past 1024, whose products
        // exceed 2²⁰) settle them within the budget.
        for n in [
            1031 * 1033,
            1031 * 1033 * 1039 * 1049,
            10_007 * 10_009,
            4 * 65_537 * 65_539,
        ] {
            assert_eq!(planner(n), (factors(n), true), "{n}");
        }
        for n in [
            360,
            150_528,
            2_162_160,
            1_000_003,
            3 * 1_000_003,
            1009 * 1013 * 4,
            65_537 * 3,
        ] {
            assert_eq!(planner(n), (factors(n), true), "{n}");
        }
        // A 60-bit prime and two 32-bit primes: no split within the budget, kept whole.
        let prime = 1_152_921_504_606_846_883u64;
        assert_eq!(planner(prime), (vec![(prime, 1)], false));
        let semiprime = 4_294_967_291u64 * 4_294_967_279;
        assert_eq!(planner(semiprime), (vec![(semiprime, 1)], false));
        // With small primes around it: those split off, the rest stays one coprime factor.
        let (list, complete) = planner(12 * 1_073_741_789 * 1_073_741_783);
        assert_eq!(list, [(2, 2), (3, 1), (1_073_741_789 * 1_073_741_783, 1)]);
        assert!(!complete);
        // Spent work is spent: nothing is left for the next stride.
        let mut work = Work::PLANNER;
        let mut out = [PrimePower::default(); MAX_PRIMES];
        factor(semiprime, &mut out, &mut work);
        assert!(work.0 < 2, "{work:?}");
    }

    #[test]
    fn bounded_factorisations_multiply_back_coprime_at_every_budget() {
        // Primes just past trial division, repeated, beside large ones: wherever the work runs
        // out, what is kept whole must share no prime with what was split off.
        let values = [
            1031 * 1031 * 8_796_093_022_151,
            1031 * 1033 * 1031 * 1033 * 1039,
            1031 * 1033 * 1039 * 2_097_143,
            1031u64.pow(3) * 1033 * 2_097_143,
        ];
        for n in values {
            for budget in 0..=600 {
                let (found, complete) = factors_within(n, Work(budget));
                let product = found
                    .iter()
                    .fold(1u128, |acc, &(p, e)| acc * u128::from(p).pow(e));
                assert_eq!(product, u128::from(n), "{n} with {budget}: {found:?}");
                for (i, &(p, _)) in found.iter().enumerate() {
                    for &(q, _) in &found[i + 1..] {
                        assert_eq!(gcd(p, q), 1, "{n} with {budget}: {found:?}");
                    }
                }
                if complete {
                    assert_eq!(found, factors(n), "{n} with {budget}");
                }
            }
        }
    }

    #[test]
    fn trial_division_by_inverses_agrees_with_division() {
        assert_eq!(TRIAL[0].prime, 3);
        assert_eq!(TRIAL[TRIAL_PRIMES - 1].prime, 1021);
        for trial in &TRIAL {
            assert_eq!(
                trial.prime.wrapping_mul(trial.inverse),
                1,
                "{}",
                trial.prime
            );
            for n in (0..2000u64).chain(u64::MAX - 2000..=u64::MAX) {
                let quotient = n.wrapping_mul(trial.inverse);
                let divides = quotient <= trial.most;
                assert_eq!(divides, n % trial.prime == 0, "{n} by {}", trial.prime);
                if divides {
                    assert_eq!(quotient, n / trial.prime);
                }
            }
        }
    }

    #[test]
    fn the_scan_finds_the_least_divisor_or_declines() {
        fn least(n: u64, bound: u64) -> u64 {
            (bound..=n).find(|d| n.is_multiple_of(*d)).unwrap()
        }
        // What the scan reaches: the least divisor `d` itself within SCAN_STEPS of `bound`, or
        // its cofactor within SCAN_STEPS of the largest one, or every cofactor (few of them),
        // and every divisor of a power of two.
        fn reached(n: u64, bound: u64, d: u64) -> bool {
            let most = n / bound;
            bound > n / 2
                || n.is_power_of_two()
                || most <= SCAN_STEPS + 1
                || d - bound < SCAN_STEPS
                || most - n / d < SCAN_STEPS
        }
        let (mut settled, mut declined) = (0, 0);
        for n in 1..=1500u64 {
            for bound in 1..=n {
                let (d, found) = (least(n, bound), least_by_scan(n, bound));
                assert_eq!(
                    found.is_some(),
                    reached(n, bound, d),
                    "least_by_scan({n}, {bound})"
                );
                match found {
                    Some(found) => {
                        assert_eq!(found, d, "least_by_scan({n}, {bound})");
                        settled += 1;
                    }
                    None => declined += 1,
                }
            }
        }
        assert!(
            settled > 10 * declined,
            "{settled} settled, {declined} declined"
        );
        for n in 1..=600u64 {
            for bound in 1..=n {
                if let Some((d, cofactor)) = least_and_cofactor_by_scan(n, bound) {
                    assert_eq!(d * cofactor, n, "least_and_cofactor_by_scan({n}, {bound})");
                }
            }
        }
        // Large values: a bound above half, and a half and a third of the value.
        let big = 6 * 1_000_000_007u64;
        assert_eq!(least_by_scan(big, big / 2 + 1), Some(big));
        assert_eq!(least_by_scan(big, big / 2 - 5), Some(big / 2));
        assert_eq!(least_by_scan(big, big / 3 - 1), Some(big / 3));
        // The largest stride there is (|i64::MIN|): twice it does not fit in 64 bits.
        assert_eq!(least_by_scan(1 << 63, (1 << 62) + 1), Some(1 << 63));
        assert_eq!(least_by_scan(1 << 63, 1 << 62), Some(1 << 62));
        // A power of two settles where a scan of its cofactors would not reach (1024 is 24
        // above the bound, and its cofactor 24 below the largest).
        assert_eq!(
            least_and_cofactor_by_scan(1 << 20, 1000),
            Some((1024, 1024))
        );
        assert_eq!(least_and_cofactor_by_scan(1 << 62, 3), Some((4, 1 << 60)));
    }

    #[test]
    fn divisors_are_indexed_by_exponents() {
        let primes = [
            PrimePower {
                prime: 2,
                exponent: 2,
            },
            PrimePower {
                prime: 3,
                exponent: 1,
            },
        ];
        let mut values = [0; 6];
        fill(&primes, &mut values);
        assert_eq!(values, [1, 2, 4, 3, 6, 12]);
        let mut walked = Exponents::default();
        for (index, &value) in values.iter().enumerate() {
            assert_eq!(walked.0, Exponents::of_index(index, &primes).0);
            let bound = Exponents::dividing(value * 5, &primes);
            assert!(walked.at_most(&bound, 2) && bound.at_most(&walked, 2));
            walked.advance(&primes);
        }
        assert_eq!(Exponents::dividing(8 * 9, &primes).0[..2], [2, 1], "capped");
    }
}
