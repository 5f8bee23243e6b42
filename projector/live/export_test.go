package live

// SetAfterStore makes Snapshot call fn after its batch is durable and
// before the live state evicts what it covers.
func SetAfterStore(p *Projection, fn func()) { p.afterStore = fn }

// StreamInMemory returns the number of activations s holds in memory.
func StreamInMemory(s *Stream) int { return s.state.InMemory() }
