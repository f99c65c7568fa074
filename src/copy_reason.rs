//! [`CopyReason`]: why a tensor is copied rather than viewed.
//!
//! The layout planner decides it ([`crate::layout`], which re-exports it) and errors carry it
//! ([`crate::Error::CopyRequired`], [`crate::Error::DeviceCopyUnavailable`]); it lives here, below
//! both, so that neither module has to reach up into the other.

/// Why a tensor is copied rather than viewed (or, where no copy may be made, why it is
/// refused: [`crate::Error::CopyRequired`] and [`crate::Error::DeviceCopyUnavailable`] name it). Its
/// `Display` is the message people read; code matches on the variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CopyReason {
    /// The caller asked for a copy (`copy=true`).
    Requested,
    /// A zero stride repeats elements (a broadcast).
    ZeroStride,
    /// The strides overlap or do not nest into one dense parent.
    NoNest,
    /// The view's parent would exceed `isize::MAX` bytes.
    ParentTooLarge,
    /// The data is not aligned for the element type.
    Misaligned,
    /// A typed request needs a plain dense array, and the view is not one.
    NotDense,
}

impl CopyReason {
    /// The message, as [`std::fmt::Display`] writes it.
    pub const fn message(self) -> &'static str {
        match self {
            Self::Requested => "a copy was requested",
            Self::ZeroStride => "a zero stride repeats elements",
            Self::NoNest => "the strides overlap or do not nest into one array",
            Self::ParentTooLarge => "the view's parent array would exceed isize::MAX bytes",
            Self::Misaligned => "misaligned: the data is not aligned for the element type",
            Self::NotDense => "the typed form needs a dense array in the requested index order",
        }
    }
}

impl std::fmt::Display for CopyReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}
