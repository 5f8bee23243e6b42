package live

// SetAfterStore makes Snapshot call fn after its batch is durable and
// before the live state evicts what it covers.
func SetAfterStore(p *Projection, fn func()) { p.afterStore = fn }
