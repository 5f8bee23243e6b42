package ledger

// Hooks are the pipeline's test synchronisation points (see testHooks).
type Hooks struct {
	// QueueFull: an appender found the queue full and is about to block.
	QueueFull func()
	// TokenWait: the committer holds a call that does not fit the open
	// batch, no token is free, and it is about to block for one.
	TokenWait func()
	// CloseWaitsReaders: Close is about to wait for reads in progress.
	CloseWaitsReaders func()
	// Sealed: the committer has sealed a call's events into the open batch.
	Sealed func()
}

// WithHooks returns o with h installed.
func WithHooks(o Options, h Hooks) Options {
	o.hooks = &testHooks{hookQueueFull: h.QueueFull, hookTokenWait: h.TokenWait, hookCloseWaitsReaders: h.CloseWaitsReaders, hookSealed: h.Sealed}
	return o
}

// InflightBatches is the number of batches applied with their fsync not
// yet acknowledged.
const InflightBatches = inflightBatches
