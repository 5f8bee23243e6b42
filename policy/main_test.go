package policy

import (
	"testing"

	"github.com/leaseledger/leaseledger/internal/testproc"
)

// TestMain fails the run when a test leaves a goroutine behind (the
// concurrency tests start many).
func TestMain(m *testing.M) { testproc.Main(m) }
