// Package cputime owns reading the CPU time a process, or one of its
// threads, has used: the benchmarks that report a CPU ratio beside a
// throughput ratio (on a shared machine the CPU spent per unit of work
// swings less than the rate) all read it here.
package cputime
