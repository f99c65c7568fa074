//! The sizes of the C structs that callers mirror, by number: Julia checks its mirrors
//! against them when it loads the library.

use super::import_plan::{RsdlImportResult, RsdlPlanOptions};
use super::managed::RsdlImportOptions;
use super::share::{RsdlArrayExport, RsdlShareResult};
use super::strided_plan::RsdlStridedPlan;

/// The numbers `rsdlpack_struct_size` knows the structs by (Julia checks its mirrors' sizes
/// against them when it loads the library).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RsdlStructId {
    ImportOptions = 0,
    PlanOptions = 1,
    ImportResult = 2,
    ArrayExport = 3,
    ShareResult = 4,
    StridedPlan = 5,
}

/// The size in bytes of the C structs callers mirror, by number: 0 `RsdlImportOptions`,
/// 1 `RsdlPlanOptions`, 2 `RsdlImportResult`, 3 `RsdlArrayExport`, 4 `RsdlShareResult`,
/// 5 `RsdlStridedPlan`; 0 for any other number. Julia checks its mirrors against these when it
/// loads the library.
#[unsafe(no_mangle)]
pub extern "C" fn rsdlpack_struct_size(which: u32) -> usize {
    match which {
        0 => size_of::<RsdlImportOptions>(),
        1 => size_of::<RsdlPlanOptions>(),
        2 => size_of::<RsdlImportResult>(),
        3 => size_of::<RsdlArrayExport>(),
        4 => size_of::<RsdlShareResult>(),
        5 => size_of::<RsdlStridedPlan>(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_size_numbers_its_structs_as_the_enum_does() {
        let numbered = [
            (RsdlStructId::ImportOptions, size_of::<RsdlImportOptions>()),
            (RsdlStructId::PlanOptions, size_of::<RsdlPlanOptions>()),
            (RsdlStructId::ImportResult, size_of::<RsdlImportResult>()),
            (RsdlStructId::ArrayExport, size_of::<RsdlArrayExport>()),
            (RsdlStructId::ShareResult, size_of::<RsdlShareResult>()),
            (RsdlStructId::StridedPlan, size_of::<RsdlStridedPlan>()),
        ];
        for (index, (id, size)) in numbered.into_iter().enumerate() {
            assert_eq!(id as usize, index, "{id:?}: the ids count from 0");
            assert_eq!(rsdlpack_struct_size(id as u32), size, "{id:?}");
        }
        assert_eq!(
            rsdlpack_struct_size(numbered.len() as u32),
            0,
            "rsdlpack_struct_size knows a struct that RsdlStructId does not name"
        );
    }
}
