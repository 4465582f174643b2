// Package interop holds ferry's interoperability tests against real Ceph
// daemons and tools: a throwaway ceph-mon that the tests start themselves,
// and the stock ceph command-line client pointed at a ferry server. It has
// no library code.
package interop
