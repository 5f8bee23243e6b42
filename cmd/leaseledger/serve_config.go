package main

import (
	"log/slog"

	"github.com/leaseledger/leaseledger/runtime"
)

// logConfigWarnings logs, at warn level, every field of the mcp.json data
// that the runtime does not honour (runtime.LoadedConfig.Warnings: entry
// and field names, never values). Data that does not load logs nothing
// here: the caller reports that error.
func logConfigWarnings(logger *slog.Logger, data []byte) {
	cfg, err := runtime.LoadConfig(data, nil)
	if err != nil {
		return
	}
	for _, w := range cfg.Warnings {
		logger.Warn("--config: " + w)
	}
}
