//! [`DimVec`]: one value per dimension, stored inline; and [`IndexOrder`], which Julia index
//! is which DLPack dimension.
//!
//! Every per-dimension list the core computes (shape, strides, a plan's parent dims, ranges and
//! permutation) has at most [`MAX_NDIM`] entries, and importing a tensor builds several of them.
//! Keeping them inline instead of on the heap takes the allocator off the import path (each list
//! would otherwise be a small allocation of its own), and makes a descriptor `Copy`.
//! A `DimVec` reads like a slice (`Deref<Target = [T]>`) and prints like one. Slots past its
//! length stay uninitialised, so that making one costs nothing.

use std::fmt;
use std::mem::MaybeUninit;
use std::ops::{Deref, DerefMut};

/// The most dimensions a tensor may have here.
pub const MAX_NDIM: usize = 32;

/// Which index of the Julia array corresponds to which DLPack index. Here, below the
/// descriptor and the planner, because both speak of it (re-exported as
/// `rsdlpack::layout::IndexOrder`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexOrder {
    /// `R[i, j]` is DLPack element `[i-1, j-1]`: a (2, 3) torch tensor is a 2×3 Julia array.
    Producer,
    /// Dims reversed: a row-major (2, 3) tensor is a plain 3×2 `Array`, no wrapper type.
    Reversed,
}

/// Up to [`MAX_NDIM`] values, inline.
#[derive(Clone, Copy)]
pub struct DimVec<T: Copy + Default> {
    /// Invariant: `items[..len]` are initialised.
    len: u8,
    items: [MaybeUninit<T>; MAX_NDIM],
}

impl<T: Copy + Default> DimVec<T> {
    pub fn new() -> Self {
        // Built field by field: written as a struct literal, LLVM merges the length's store
        // with the uninitialised slots into one memset of the whole list, which a small plan
        // pays for on every call (BENCHMARKS.md, "Measured choices").
        let mut dims = MaybeUninit::<Self>::uninit();
        // SAFETY: `len` is written before the value is assumed initialised, and `items` is
        // `MaybeUninit` slots, which need no initialisation; `len = 0` keeps the invariant.
        unsafe {
            (&raw mut (*dims.as_mut_ptr()).len).write(0);
            dims.assume_init()
        }
    }

    /// `len` copies of `value`; `None` when `len` exceeds [`MAX_NDIM`].
    pub fn filled(value: T, len: usize) -> Option<Self> {
        (len <= MAX_NDIM).then(|| std::iter::repeat_n(value, len).collect())
    }

    /// A copy of `values`; `None` when it has more than [`MAX_NDIM`] entries.
    pub fn from_slice(values: &[T]) -> Option<Self> {
        let mut dims = Self::new();
        dims.extend_from_slice(values)?;
        Some(dims)
    }

    /// Grows to `len` entries with copies of `value` (in place; see `extend_from_slice`).
    ///
    /// # Panics
    /// When `len` exceeds [`MAX_NDIM`] (see [`DimVec::push`]).
    pub fn grow_to(&mut self, len: usize, value: T) {
        for slot in &mut self.items[usize::from(self.len)..len] {
            *slot = MaybeUninit::new(value);
        }
        self.len = self.len.max(len as u8);
    }

    /// Appends `values` in one copy (filling a `DimVec` in place, where moving a whole one
    /// would copy every slot); `None`, and nothing appended, when they do not fit.
    pub fn extend_from_slice(&mut self, values: &[T]) -> Option<()> {
        let len = usize::from(self.len);
        let free = &mut self.items[len..];
        if values.len() > free.len() {
            return None;
        }
        // Most tensors have a few dims: copied by a loop of unknown length, they would go
        // through a call to `memcpy`, which costs more than moving two values. Short lists are
        // copied at a length known here instead (BENCHMARKS.md, "Measured choices").
        match values.len() {
            1 => copy_exact::<T, 1>(free, values),
            2 => copy_exact::<T, 2>(free, values),
            3 => copy_exact::<T, 3>(free, values),
            4 => copy_exact::<T, 4>(free, values),
            _ => {
                for (slot, &value) in free.iter_mut().zip(values) {
                    *slot = MaybeUninit::new(value);
                }
            }
        }
        self.len += values.len() as u8;
        Some(())
    }

    /// Empties the list (in place).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Appends `value`.
    ///
    /// # Panics
    /// When already full: callers build at most one entry per dimension of a tensor whose rank
    /// was checked against [`MAX_NDIM`].
    pub fn push(&mut self, value: T) {
        self.items[usize::from(self.len)] = MaybeUninit::new(value);
        self.len += 1;
    }

    pub fn to_vec(&self) -> Vec<T> {
        self.deref().to_vec()
    }
}

impl<T: Copy + Default> Default for DimVec<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + Default> Deref for DimVec<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        let initialised = &self.items[..usize::from(self.len)];
        // SAFETY: `items[..len]` are initialised (the type's invariant: only `push` grows
        // `len`, after writing the slot), and `MaybeUninit<T>` has `T`'s layout.
        unsafe { &*(initialised as *const [MaybeUninit<T>] as *const [T]) }
    }
}

impl<T: Copy + Default> DerefMut for DimVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        let initialised = &mut self.items[..usize::from(self.len)];
        // SAFETY: as in `deref`; writes through the slice keep the slots initialised.
        unsafe { &mut *(initialised as *mut [MaybeUninit<T>] as *mut [T]) }
    }
}

impl<T: Copy + Default + fmt::Debug> fmt::Debug for DimVec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.deref().fmt(f)
    }
}

impl<T: Copy + Default + PartialEq> PartialEq for DimVec<T> {
    fn eq(&self, other: &Self) -> bool {
        self.deref() == other.deref()
    }
}

impl<T: Copy + Default + Eq> Eq for DimVec<T> {}

impl<T: Copy + Default + PartialEq> PartialEq<Vec<T>> for DimVec<T> {
    fn eq(&self, other: &Vec<T>) -> bool {
        self.deref() == other.as_slice()
    }
}

impl<T: Copy + Default + PartialEq> PartialEq<[T]> for DimVec<T> {
    fn eq(&self, other: &[T]) -> bool {
        self.deref() == other
    }
}

impl<T: Copy + Default + PartialEq, const N: usize> PartialEq<[T; N]> for DimVec<T> {
    fn eq(&self, other: &[T; N]) -> bool {
        self.deref() == other.as_slice()
    }
}

impl<'a, T: Copy + Default> IntoIterator for &'a DimVec<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<T: Copy + Default> FromIterator<T> for DimVec<T> {
    /// # Panics
    /// On more than [`MAX_NDIM`] items (see [`DimVec::push`]).
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut dims = Self::new();
        for value in iter {
            dims.push(value);
        }
        dims
    }
}

/// Copies `values`, which holds exactly `N` entries, into the first `N` slots of `free`.
#[inline(always)]
fn copy_exact<T: Copy, const N: usize>(free: &mut [MaybeUninit<T>], values: &[T]) {
    let (Ok(values), Some(slots)) = (<&[T; N]>::try_from(values), free.first_chunk_mut::<N>())
    else {
        unreachable!("callers pass exactly N values and at least N free slots");
    };
    for (slot, &value) in slots.iter_mut().zip(values) {
        *slot = MaybeUninit::new(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_in_place_and_compares_by_contents_with_every_kind_of_list() {
        let mut dims: DimVec<i64> = DimVec::from_slice(&[1, 2]).unwrap();
        dims.grow_to(4, 9);
        assert_eq!(dims.len(), 4);
        let same = DimVec::from_slice(&[1, 2, 9, 9]).unwrap();
        let other = DimVec::from_slice(&[1, 2, 9, 8]).unwrap();
        assert!(dims == same && dims != other);
        assert!(dims == vec![1, 2, 9, 9] && dims != vec![1, 2, 9]);
        assert!(dims == [1i64, 2, 9, 9][..] && dims != [1i64, 2, 9][..]);
        assert!(dims == [1i64, 2, 9, 9] && dims != [1i64, 2, 9, 8]);
    }

    #[test]
    fn reads_compares_and_prints_like_a_slice() {
        let mut dims: DimVec<i64> = [3, 4].into_iter().collect();
        dims.push(5);
        assert_eq!(dims.len(), 3);
        assert_eq!(dims, vec![3, 4, 5]);
        assert_eq!(dims, [3, 4, 5]);
        assert_eq!(format!("{dims:?}"), "[3, 4, 5]");
        dims.reverse();
        assert_eq!(dims.to_vec(), vec![5, 4, 3]);
        assert!(DimVec::<i64>::from_slice(&[0; MAX_NDIM + 1]).is_none());
        assert_eq!(DimVec::filled(7u8, 2).unwrap(), [7, 7]);
    }
}
