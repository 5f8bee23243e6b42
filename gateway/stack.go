package gateway

// handlerStackBytes is the stack a request handler makes room for, in one
// step, before it serves a method through the runtime.
//
// The go-sdk runs every request on a goroutine of its own, started with
// the runtime's average stack size, which the many small idle goroutines
// of a server keep small. A tools/call then runs through this package,
// the runtime's gate, the go-sdk's client and net/http: deep enough that
// the stack doubled twice during every call (in the runtime's lease
// lookup and in its HTTP round tripper), and each doubling copies the
// stack and adjusts every frame on it, the deeper the dearer. Growing it
// once at the handler's entry, where the stack is a few go-sdk frames
// deep, costs one cheap copy: profiled under `leaseledger bench gateway
// --profile`, the stack growth on a sequential HTTP call's own path fell
// from ≈ 40 µs to ≈ 10 µs of CPU (docs/benchmarks.md). A path deeper than
// this still works: its stack grows as before.
const handlerStackBytes = 16 << 10

// growHandlerStack grows the calling goroutine's stack so that at least
// handlerStackBytes more fit: the runtime sizes a stack for the frame that
// overflows it, so one frame of that size grows it in one copy. The stack
// shrinks again at a later garbage collection if the goroutine lives on
// using little of it; a go-sdk handler goroutine ends with its request.
//
//go:noinline
func growHandlerStack() {
	var frame [handlerStackBytes]byte
	keepFrame(frame[:])
}

// keepFrame uses frame, so that the compiler keeps growHandlerStack's
// frame at its declared size.
//
//go:noinline
func keepFrame(frame []byte) { frame[len(frame)-1] = 1 }
