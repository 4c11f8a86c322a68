package postgres

// verifyBounds makes every pipelined commit check, inside its transaction
// and before its COMMIT, that the bounds of the line it worked out
// (batch.after) are those stored: a difference fails the transaction. The
// package's tests turn it on (verify_internal_test.go); it costs a
// statement per gate and commit.
var verifyBounds bool
