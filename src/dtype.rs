//! The dtype table: which DLPack `DLDataType` becomes which Julia element type, and back.
//!
//! Julia names are part of the contract with the Julia glue, which maps each [`ElementType`]
//! to a Julia type by its [`ElementType::code`] (a stable small integer) rather than by parsing
//! names. fp8/fp6/fp4 codes have no Julia type: they arrive as raw bytes (`UInt8`) and keep
//! their original DLPack code so that nothing is lost when they travel on.

use crate::error::{Error, Result};
use dlpark::ffi::{DLDataType, DLDataTypeCode};

/// A scalar element type that can cross between DLPack and Julia.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementType {
    Bool,
    Int8,
    Int16,
    Int32,
    Int64,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    Float16,
    BFloat16,
    Float32,
    Float64,
    ComplexF32,
    ComplexF64,
    /// Complex of two bfloat16 (`kDLBcomplex`, added to DLPack after 1.3; see [`BCOMPLEX`]).
    ComplexBF16,
    /// An fp8/fp6/fp4 code carried as raw bytes. `bits` is 8 for fp8, and for fp6/fp4 stored one
    /// element per byte (`IS_SUBBYTE_TYPE_PADDED`).
    RawBytes {
        code: u8,
        bits: u8,
    },
    /// fp6/fp4 packed several to a byte: importable only as a flat byte vector.
    PackedBits {
        code: u8,
        bits: u8,
    },
}

impl ElementType {
    /// Every element type with a Julia counterpart, in [`Self::code`] order.
    pub const NAMED: [ElementType; 16] = [
        ElementType::Bool,
        ElementType::Int8,
        ElementType::Int16,
        ElementType::Int32,
        ElementType::Int64,
        ElementType::UInt8,
        ElementType::UInt16,
        ElementType::UInt32,
        ElementType::UInt64,
        ElementType::Float16,
        ElementType::BFloat16,
        ElementType::Float32,
        ElementType::Float64,
        ElementType::ComplexF32,
        ElementType::ComplexF64,
        ElementType::ComplexBF16,
    ];

    /// Reads a DLPack dtype. `subbyte_padded` is the `IS_SUBBYTE_TYPE_PADDED` flag.
    // Inlined, with the decoding behind an `Option` (returned in a register): a `Result` with
    // an `Error` inside is returned through memory, and reloading it stalls every import on
    // store-to-load forwarding (BENCHMARKS.md, "Measured choices").
    #[inline]
    pub fn from_dlpack(dtype: DLDataType, subbyte_padded: bool) -> Result<Self> {
        match Self::decode(dtype, subbyte_padded) {
            Some(element) => Ok(element),
            None => Err(Self::refusal(dtype)),
        }
    }

    #[cold]
    fn refusal(dtype: DLDataType) -> Error {
        if dtype.lanes != 1 {
            Error::VectorDtype { dtype }
        } else {
            Error::UnsupportedDtype { dtype }
        }
    }

    /// The element type of `dtype`, or `None` for what [`Self::refusal`] explains.
    fn decode(dtype: DLDataType, subbyte_padded: bool) -> Option<Self> {
        if dtype.lanes != 1 {
            return None;
        }
        let code = dtype.code;
        let element = match (code, dtype.bits) {
            (DLDataTypeCode::BOOL, 8) => Self::Bool,
            (DLDataTypeCode::INT, 8) => Self::Int8,
            (DLDataTypeCode::INT, 16) => Self::Int16,
            (DLDataTypeCode::INT, 32) => Self::Int32,
            (DLDataTypeCode::INT, 64) => Self::Int64,
            (DLDataTypeCode::UINT, 8) => Self::UInt8,
            (DLDataTypeCode::UINT, 16) => Self::UInt16,
            (DLDataTypeCode::UINT, 32) => Self::UInt32,
            (DLDataTypeCode::UINT, 64) => Self::UInt64,
            (DLDataTypeCode::FLOAT, 16) => Self::Float16,
            (DLDataTypeCode::BFLOAT, 16) => Self::BFloat16,
            (DLDataTypeCode::FLOAT, 32) => Self::Float32,
            (DLDataTypeCode::FLOAT, 64) => Self::Float64,
            (DLDataTypeCode::COMPLEX, 64) => Self::ComplexF32,
            (DLDataTypeCode::COMPLEX, 128) => Self::ComplexF64,
            (BCOMPLEX, 32) => Self::ComplexBF16,
            (c, 8) if is_fp8(c) => Self::RawBytes { code: c.0, bits: 8 },
            (c, bits) if expected_subbyte_bits(c) == Some(bits) => {
                if subbyte_padded {
                    Self::RawBytes { code: c.0, bits }
                } else {
                    Self::PackedBits { code: c.0, bits }
                }
            }
            _ => return None,
        };
        Some(element)
    }

    /// The DLPack dtype this element type is exported as.
    pub fn to_dlpack(self) -> DLDataType {
        let (code, bits) = match self {
            Self::Bool => (DLDataTypeCode::BOOL, 8),
            Self::Int8 => (DLDataTypeCode::INT, 8),
            Self::Int16 => (DLDataTypeCode::INT, 16),
            Self::Int32 => (DLDataTypeCode::INT, 32),
            Self::Int64 => (DLDataTypeCode::INT, 64),
            Self::UInt8 => (DLDataTypeCode::UINT, 8),
            Self::UInt16 => (DLDataTypeCode::UINT, 16),
            Self::UInt32 => (DLDataTypeCode::UINT, 32),
            Self::UInt64 => (DLDataTypeCode::UINT, 64),
            Self::Float16 => (DLDataTypeCode::FLOAT, 16),
            Self::BFloat16 => (DLDataTypeCode::BFLOAT, 16),
            Self::Float32 => (DLDataTypeCode::FLOAT, 32),
            Self::Float64 => (DLDataTypeCode::FLOAT, 64),
            Self::ComplexF32 => (DLDataTypeCode::COMPLEX, 64),
            Self::ComplexF64 => (DLDataTypeCode::COMPLEX, 128),
            Self::ComplexBF16 => (BCOMPLEX, 32),
            Self::RawBytes { code, bits } | Self::PackedBits { code, bits } => {
                (DLDataTypeCode(code), bits)
            }
        };
        DLDataType::scalar(code, bits)
    }

    /// Bytes one element occupies in memory (packed types: 1, the unit of their byte vector).
    pub fn size(self) -> usize {
        match self {
            Self::Bool | Self::Int8 | Self::UInt8 => 1,
            Self::Int16 | Self::UInt16 | Self::Float16 | Self::BFloat16 => 2,
            Self::Int32 | Self::UInt32 | Self::Float32 | Self::ComplexBF16 => 4,
            Self::Int64 | Self::UInt64 | Self::Float64 | Self::ComplexF32 => 8,
            Self::ComplexF64 => 16,
            Self::RawBytes { .. } | Self::PackedBits { .. } => 1,
        }
    }

    /// The alignment Julia's element type needs (complex numbers: that of their parts).
    pub fn alignment(self) -> usize {
        match self {
            Self::ComplexF32 => 4,
            Self::ComplexF64 => 8,
            Self::ComplexBF16 => 2,
            other => other.size(),
        }
    }

    /// The Julia element type, as Julia spells it.
    pub fn julia_name(self) -> &'static str {
        match self {
            Self::Bool => "Bool",
            Self::Int8 => "Int8",
            Self::Int16 => "Int16",
            Self::Int32 => "Int32",
            Self::Int64 => "Int64",
            Self::UInt8 | Self::RawBytes { .. } | Self::PackedBits { .. } => "UInt8",
            Self::UInt16 => "UInt16",
            Self::UInt32 => "UInt32",
            Self::UInt64 => "UInt64",
            Self::Float16 => "Float16",
            Self::BFloat16 => "BFloat16",
            Self::Float32 => "Float32",
            Self::Float64 => "Float64",
            Self::ComplexF32 => "ComplexF32",
            Self::ComplexF64 => "ComplexF64",
            Self::ComplexBF16 => "Complex{BFloat16}",
        }
    }

    /// The Julia element type's name with its parameters (for messages).
    pub fn julia_name_full(self) -> String {
        match self {
            Self::RawBytes { code, bits } => format!("DLPackRaw{{{code}, {bits}}}"),
            named => named.julia_name().to_string(),
        }
    }

    /// A stable integer for the Julia glue: the index in [`Self::NAMED`]; for a raw-byte
    /// element, [`RAW_CODE_BASE`] plus its DLPack code × 256 plus its bits (Julia's
    /// `DLPackRaw{code, bits}`, which keeps the code through a round trip); 5 (`UInt8`) for
    /// packed sub-byte data, which arrives as a byte vector.
    // A match, not a search of `NAMED`: every import plan asks (the test below holds the two
    // to the same order).
    pub fn code(self) -> u32 {
        let named = match self {
            Self::Bool => ElementCode::Bool,
            Self::Int8 => ElementCode::Int8,
            Self::Int16 => ElementCode::Int16,
            Self::Int32 => ElementCode::Int32,
            Self::Int64 => ElementCode::Int64,
            Self::UInt8 | Self::PackedBits { .. } => ElementCode::Uint8,
            Self::UInt16 => ElementCode::Uint16,
            Self::UInt32 => ElementCode::Uint32,
            Self::UInt64 => ElementCode::Uint64,
            Self::Float16 => ElementCode::Float16,
            Self::BFloat16 => ElementCode::Bfloat16,
            Self::Float32 => ElementCode::Float32,
            Self::Float64 => ElementCode::Float64,
            Self::ComplexF32 => ElementCode::ComplexF32,
            Self::ComplexF64 => ElementCode::ComplexF64,
            Self::ComplexBF16 => ElementCode::Bcomplex,
            Self::RawBytes { code, bits } => {
                return RAW_CODE_BASE + (u32::from(code) << 8) + u32::from(bits);
            }
        };
        named as u32
    }

    /// Inverse of [`Self::code`] (packed data excepted: code 5 is `UInt8`).
    pub fn from_code(code: u32) -> Option<Self> {
        if let Some(raw) = code.checked_sub(RAW_CODE_BASE) {
            let (dlpack_code, bits) = (u8::try_from(raw >> 8).ok()?, (raw & 0xff) as u8);
            let dtype = DLDataType::scalar(DLDataTypeCode(dlpack_code), bits);
            return match Self::from_dlpack(dtype, true) {
                Ok(raw @ Self::RawBytes { .. }) => Some(raw),
                _ => None,
            };
        }
        Self::NAMED.get(code as usize).copied()
    }
}

/// `kDLBcomplex`: complex numbers of two bfloat16, `DLDataTypeCode` 18 (dlpack PR #187, merged
/// after the 1.3 release without a version bump; dlpark does not name it yet).
pub const BCOMPLEX: DLDataTypeCode = DLDataTypeCode(18);

/// Where [`ElementType::code`]'s raw-byte codes start (ABI: `RSDLPACK_RAW_CODE_BASE` in
/// include/rsdlpack.h).
pub const RAW_CODE_BASE: u32 = 0x1_0000;

/// [`ElementType::code`] of the named element types (the index of each in
/// [`ElementType::NAMED`]): the C ABI's element codes, which C names `RsdlElementCode`
/// (`RSDL_ELEMENT_CODE_FLOAT32`, …) and Julia's and ctypes' constants are generated from. The
/// numbers are ABI: append, never renumber. Raw-byte elements have codes from
/// [`RAW_CODE_BASE`] up instead.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElementCode {
    Bool = 0,
    Int8 = 1,
    Int16 = 2,
    Int32 = 3,
    Int64 = 4,
    Uint8 = 5,
    Uint16 = 6,
    Uint32 = 7,
    Uint64 = 8,
    Float16 = 9,
    Bfloat16 = 10,
    Float32 = 11,
    Float64 = 12,
    ComplexF32 = 13,
    ComplexF64 = 14,
    /// `kDLBcomplex`: complex of two bfloat16 ([`ElementType::ComplexBF16`]).
    Bcomplex = 15,
}

fn is_fp8(code: DLDataTypeCode) -> bool {
    (DLDataTypeCode::FLOAT8_E3M4.0..=DLDataTypeCode::FLOAT8_E8M0FNU.0).contains(&code.0)
}

fn expected_subbyte_bits(code: DLDataTypeCode) -> Option<u8> {
    match code {
        DLDataTypeCode::FLOAT6_E2M3FN | DLDataTypeCode::FLOAT6_E3M2FN => Some(6),
        DLDataTypeCode::FLOAT4_E2M1FN => Some(4),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_type_round_trips_through_dlpack_and_code() {
        for (index, element) in ElementType::NAMED.into_iter().enumerate() {
            assert_eq!(
                element.code() as usize,
                index,
                "{element:?}: code is its NAMED index"
            );
            let back = ElementType::from_dlpack(element.to_dlpack(), false).unwrap();
            assert_eq!(back, element);
            assert_eq!(ElementType::from_code(element.code()), Some(element));
            assert_eq!(element.to_dlpack().bits as usize, element.size() * 8);
        }
    }

    #[test]
    fn bcomplex_is_a_named_pair_of_bfloat16() {
        let dtype = DLDataType::scalar(BCOMPLEX, 32);
        let element = ElementType::from_dlpack(dtype, false).unwrap();
        assert_eq!(element, ElementType::ComplexBF16);
        assert_eq!((element.size(), element.alignment()), (4, 2));
        assert_eq!(element.julia_name(), "Complex{BFloat16}");
        for bits in [16, 64] {
            assert!(ElementType::from_dlpack(DLDataType::scalar(BCOMPLEX, bits), false).is_err());
        }
    }

    #[test]
    fn fp8_codes_arrive_as_raw_bytes_keeping_their_code() {
        for code in 7..=14u8 {
            let dtype = DLDataType::scalar(DLDataTypeCode(code), 8);
            let element = ElementType::from_dlpack(dtype, false).unwrap();
            assert_eq!(element, ElementType::RawBytes { code, bits: 8 });
            assert_eq!(element.julia_name(), "UInt8");
            assert_eq!(element.to_dlpack(), dtype);
            assert_eq!(element.code(), RAW_CODE_BASE + (u32::from(code) << 8) + 8);
            assert_eq!(ElementType::from_code(element.code()), Some(element));
        }
    }

    #[test]
    fn subbyte_codes_are_packed_unless_flagged_padded() {
        let fp4 = DLDataType::scalar(DLDataTypeCode::FLOAT4_E2M1FN, 4);
        assert_eq!(
            ElementType::from_dlpack(fp4, false).unwrap(),
            ElementType::PackedBits { code: 17, bits: 4 }
        );
        assert_eq!(
            ElementType::from_dlpack(fp4, true).unwrap(),
            ElementType::RawBytes { code: 17, bits: 4 }
        );
        let fp6_with_wrong_bits = DLDataType::scalar(DLDataTypeCode::FLOAT6_E2M3FN, 8);
        assert!(ElementType::from_dlpack(fp6_with_wrong_bits, false).is_err());
    }

    #[test]
    fn raw_codes_that_name_no_raw_dtype_are_refused() {
        let padded_fp4 = ElementType::RawBytes { code: 17, bits: 4 };
        assert_eq!(ElementType::from_code(padded_fp4.code()), Some(padded_fp4));
        for bad in [
            RAW_CODE_BASE + (2 << 8) + 32, // float32 is named, not raw
            RAW_CODE_BASE + (17 << 8) + 8, // fp4 with 8 bits
            RAW_CODE_BASE + (300 << 8),    // not a DLPack code
            ElementType::NAMED.len() as u32,
        ] {
            assert_eq!(ElementType::from_code(bad), None, "{bad:#x}");
        }
        assert_eq!(
            ElementType::PackedBits { code: 17, bits: 4 }.code(),
            ElementType::UInt8.code()
        );
    }

    #[test]
    fn lanes_other_than_one_are_refused_by_name() {
        let float4 = DLDataType::new(DLDataTypeCode::FLOAT, 32, 4);
        let message = ElementType::from_dlpack(float4, false)
            .unwrap_err()
            .to_string();
        assert!(message.contains("4 lanes"), "{message}");
    }

    #[test]
    fn unknown_codes_and_widths_are_refused() {
        for dtype in [
            DLDataType::scalar(DLDataTypeCode::FLOAT, 24),
            DLDataType::scalar(DLDataTypeCode::OPAQUEHANDLE, 64),
            DLDataType::scalar(DLDataTypeCode(200), 8),
            DLDataType::scalar(DLDataTypeCode::BOOL, 1),
        ] {
            assert!(matches!(
                ElementType::from_dlpack(dtype, false),
                Err(Error::UnsupportedDtype { .. })
            ));
        }
    }
}
