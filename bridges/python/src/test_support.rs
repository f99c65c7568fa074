//! What the bridge's unit tests share.

/// Asserts what happens without a driver (CI); scripts/test.sh skips the without_a_driver_*
/// tests where one exists.
pub fn require_no_driver() {
    let here = rsdlpack::cuda::driver();
    assert!(
        matches!(here, Err(rsdlpack::Error::NoCudaDriver)),
        "asserts the no-driver behaviour, but this machine answers {here:?}: scripts/test.sh \
         skips without_a_driver_* tests where a driver exists"
    );
}
