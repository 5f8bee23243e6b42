package runtime

// testFPKey keys the fingerprints the tests compare directly (a Manager
// draws its own random key). It lives in a file without build tags because
// tests of every platform use it.
var testFPKey = []byte("leaseledger test fingerprint key")
