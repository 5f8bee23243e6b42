//go:build linux

package gateway

import (
	"testing"
	"time"

	"github.com/leaseledger/leaseledger/policy"
)

// benchPolicy is a policy set of the size and shape an operator writes:
// groups of principals, per-server permits decided by tool hints, and
// forbids. The benchmark's principal ("" without tokens) is allowed the
// echo tool by the read-only permit.
const benchPolicy = `
@id("start-any") permit (principal, action == Leaseledger::Action::"start_server", resource);
@id("read-only") permit (principal, action == Leaseledger::Action::"call_tool", resource) when { context.read_only };
@id("ops") permit (principal in Leaseledger::Group::"ops", action, resource);
@id("no-destructive") forbid (principal, action == Leaseledger::Action::"call_tool", resource) when { context.destructive && !context.read_only };
@id("no-secrets") forbid (principal, action == Leaseledger::Action::"read_resource", resource) when { resource.uri like "secret://*" };
@id("office-only") forbid (principal in Leaseledger::Group::"contractors", action, resource) unless { context has client_address && context.client_address.isInRange(ip("10.0.0.0/8")) };
`

// BenchmarkGatewayCallPolicy measures what the access policy adds to a
// tool call through the gateway: the same call, sequentially, through a
// gateway without a policy and through one deciding with benchPolicy,
// alternating in chunks so machine noise hits both alike. Each policy
// call's decision is a cached map lookup after the first (the policy
// package's BenchmarkDecide measures the lookup alone); the call itself
// records the deciding policy ids in call.admitted. Compare the ratio:
//
//	go test -run '^$' -bench GatewayCallPolicy -benchtime 1000x ./gateway/
func BenchmarkGatewayCallPolicy(b *testing.B) {
	set, err := policy.Parse("bench.cedar", []byte(benchPolicy), "", nil)
	if err != nil {
		b.Fatal(err)
	}
	plain, _ := benchGateway(b, 2)
	withPolicy, _ := benchGatewayWith(b, 2, func(o *Options) { o.Policy = policy.NewEngine(set) })
	ps, ws := plain.open(b), withPolicy.open(b)
	for range 50 { // warm both paths (the first calls start the leases)
		plain.echo(b, ps)
		withPolicy.echo(b, ws)
	}
	b.ResetTimer()
	var tPlain, tPolicy time.Duration
	const chunk = 50
	for done := 0; done < b.N; {
		n := min(chunk, b.N-done)
		t0 := time.Now()
		for range n {
			plain.echo(b, ps)
		}
		t1 := time.Now()
		for range n {
			withPolicy.echo(b, ws)
		}
		tPlain += t1.Sub(t0)
		tPolicy += time.Since(t1)
		done += n
	}
	b.StopTimer()
	b.ReportMetric(float64(tPlain.Microseconds())/float64(b.N), "plain-µs/call")
	b.ReportMetric(float64(tPolicy.Microseconds())/float64(b.N), "policy-µs/call")
	b.ReportMetric(float64(tPolicy)/float64(tPlain), "policy/plain")
}
