package gateway

import (
	"runtime/debug"
	"testing"
	"unsafe"
)

// deepFrames calls itself n times with a 1 KiB frame each: about n KiB of
// stack below its caller.
//
//go:noinline
func deepFrames(n int) byte {
	var frame [1 << 10]byte
	frame[n%len(frame)] = byte(n)
	if n == 0 {
		return frame[0]
	}
	return deepFrames(n-1) + frame[len(frame)-1]
}

// stackMoves runs, on a fresh goroutine like a go-sdk request handler's,
// growHandlerStack when grow is set and then a call depthKiB deep, and
// reports whether the goroutine's stack moved during the deep call: a
// stack that grows is copied, so a local's address changes.
func stackMoves(grow bool, depthKiB int) bool {
	moved := make(chan bool)
	go func() {
		var probe byte
		if grow {
			growHandlerStack()
		}
		before := uintptr(unsafe.Pointer(&probe))
		deepFrames(depthKiB)
		moved <- uintptr(unsafe.Pointer(&probe)) != before
	}()
	return <-moved
}

// TestGrowHandlerStack: after growHandlerStack, a call nearly
// handlerStackBytes deep no longer grows the stack; without it, on a fresh
// goroutine, it does (the control, which shows the test can fail).
func TestGrowHandlerStack(t *testing.T) {
	// A collection may shrink a goroutine's stack, which moves it too.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	depth := handlerStackBytes>>10 - 4 // KiB, leaving room for the frames around
	if !stackMoves(false, depth) {
		t.Fatalf("a fresh goroutine's stack held a %d KiB call without growing: the control cannot tell", depth)
	}
	if stackMoves(true, depth) {
		t.Fatalf("the stack grew during a %d KiB call after growHandlerStack (%d bytes)", depth, handlerStackBytes)
	}
}
