package gateway

import (
	"context"

	"github.com/leaseledger/leaseledger/runtime"
)

// withCallProgress relays a call's progress notifications to the client
// when it sent a progress token: the runtime delivers them in order from
// a goroutine of the call, and they go out on the call's own stream.
func (s *session) withCallProgress(ctx context.Context, req *runtime.CallRequest, token any) {
	if token == nil {
		return
	}
	req.Progress = func(p runtime.Progress) { s.notifyProgress(ctx, token, p) }
}
