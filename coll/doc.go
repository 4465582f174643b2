// Package coll is the logic of CaRT's collective RPCs (corpc) as pure
// code: the tree a collective travels down, and the aggregation state
// machine of one rank's part in one collective. It does no I/O, starts no
// goroutines, reads no clock and takes no locks; time enters as an int64
// argument on whatever monotonic nanosecond scale the caller chooses. The
// rpc package drives it over real connections, and the simulator drives
// thousands of machines over a simulated network.
//
// # Trees
//
// A collective covers a scope: a sorted, de-duplicated list of ranks (the
// group's ranks minus excluded ones, or a given subset; see Scope). Every
// rank computes the same tree locally from the scope, the root and the
// Topology, as CaRT's crt_tree_get_children does: a rank's tree rank is
// its index in the scope minus the root's index, modulo the scope's size,
// and
//
//   - Flat: the root's children are all other ranks, in scope order; every
//     other rank is a leaf whose parent is the root;
//   - KAry(k): the children of tree rank r are r·k+1 … r·k+k (those below
//     the size); the parent of r is ⌊(r−1)/k⌋;
//   - KNomial(k): write r in base k; for each digit position d from the
//     least significant up, while that digit is 0, r + i·k^d for
//     i = 1 … k−1 are children (stopping at the first one ≥ size); the
//     parent clears the least significant non-zero digit.
//
// Topology encodes a tree as CaRT does: type<<16 | ratio, with Flat = 1,
// KAry = 2, KNomial = 3 and a ratio from 2 to 64 (ignored for Flat).
//
// # Aggregation
//
// A Machine is one rank's part in one collective: started with its
// children (Config.Tree, Config.Self), it is fed this rank's own result
// (Local or LocalFailed), its children's reports (Reply), failed forwards
// (ChildFailed), the time (Tick) and aborts (Abort). When every expected
// contribution is in, or the deadline passes, or it is aborted, it is
// done, and Result gives the aggregate, the ranks that answered and the
// ranks that failed or did not answer, each with a Reason. A collective
// therefore always ends with a result: nothing pending survives the
// deadline or an abort.
//
// Beyond CaRT, which keeps one error per subtree, every rank of the scope
// is accounted for: when a forward to a child fails, every rank of that
// child's subtree is listed, with the child's reason and the child as
// Via. A child's Report carries its own subtree's failures, so the root
// learns every failure of the tree.
//
// The aggregate is built as CaRT builds it: this rank's own result first
// (replies that arrive before it are parked, so the local result is the
// base the children are combined into), then the children's aggregates,
// each combined with Config.Aggregate(acc, v). With OrderArrival
// (the default) children are combined in the order their reports arrive;
// with OrderTree they are combined in the tree's child order whatever the
// arrival order (out-of-order reports are parked), so a non-commutative
// aggregation function gives the same result on every run: the pre-order
// of the tree. Failed ranks contribute nothing (CaRT calls co_aggregate
// with an empty reply for them; ferry does not call it at all).
//
// # Wire
//
// Header is the collective header every forwarded request carries (CaRT's
// crt_corpc_hdr: id, opcode, root, group version, topology, the filter
// ranks and whether they are excluded or the subset), and Report is what
// a rank answers its parent with (its subtree's aggregate and failures).
// Both are hand-written little-endian encodings whose decoders check every
// length before allocating and fail with a *DecodeError that matches one
// of the package's sentinels.
package coll
