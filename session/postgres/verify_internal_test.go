package postgres

// Every test of the package, the shared suite's randomized model test
// among them, checks the bounds each commit worked out against the table.
func init() { verifyBounds = true }
