// Package swim is SWIM failure detection and membership dissemination as a
// pure state machine, after DAOS CaRT's SWIM (src/cart/swim) with
// hashicorp/memberlist's Lifeguard extensions.
//
// The machine does no I/O, starts no goroutine and reads no clock. Its
// inputs are Tick(now) (timers), Receive(now, from, msg) (a message from a
// member), Add and Remove (membership from the group layer), and a seeded
// random source given to New; its outputs are Outbox (messages to send)
// and Events (state transitions for the application). Time is a virtual,
// monotonic time.Duration since any epoch; the caller calls Tick at Next.
// Whatever drives it — ferry's RPC layer, or a simulator running thousands
// of machines in one goroutine — only moves messages and time.
//
// # The protocol
//
// Every Period a machine pings the next member of its probe order: a
// random permutation of the members (p ↦ (a·p+b) mod n with random a
// coprime to n, drawn again when membership changes, as DAOS reshuffles
// only then), walked round-robin, so every member is probed by every
// prober once per n−1 periods; dead members are skipped, suspects are
// still probed. The target answers with an Ack. If
// none comes within PingTimeout, the prober asks IndirectPings (k) random
// alive members to ping the target for it (KindPingReq); each helper pings
// the target once however many ask, and answers each requester with an Ack
// if the target answers it, or a Nack at its own PingTimeout. If no ack
// comes within IndirectTimeout either, the prober suspects the target. Any
// message from the target during its probe counts as its ack (DAOS).
//
// A suspicion at incarnation i ends in death at its deadline unless the
// member refutes it: every message carries, first, the state of the member
// it is about, so the suspect learns of its suspicion from its next ping
// and answers with Alive at incarnation i+1, which spreads and wins. Merge
// rules: a higher incarnation wins; at an equal one Dead beats Suspect
// beats Alive; only a member raises its own incarnation. Dead is final for
// that incarnation: only Alive at a higher one (the member refuting its
// death, or restarting higher, or Add from the group layer) brings it back.
//
// Updates travel piggybacked on every message, in DAOS's order: the state
// of the message's target, the sender's own, the receiver's, then up to
// MaxPiggyback recent changes, those sent least often first. Each change is
// sent lambda·ceil(log10(n+1)) times (RetransmitMult = lambda, memberlist's
// rule; DAOS sends each 50 times whatever n), then dropped.
//
// # What cuts false positives
//
//   - Local health (Lifeguard LHA-Probe): a score in [0, AwarenessMax−1]
//     rises when this member's own probes fail without the helpers' nacks
//     (expected minus received; +1 with no helpers) and when it must refute
//     a suspicion of itself, and falls by one with each successful probe.
//     Period, PingTimeout and IndirectTimeout are scaled by score+1, so a
//     member that cannot hear others slows down instead of accusing them.
//     With nacks, probing a really dead member does not raise the score:
//     the helpers' nacks show the fault is the target's.
//   - Confirmations (Lifeguard LHA-Suspicion): a suspicion's timeout starts
//     at SuspicionTimeout and shrinks towards SuspicionMinTimeout as
//     independent accusers (distinct origins of Suspect updates at the same
//     incarnation, or this member's own failed probe) confirm it, by
//     memberlist's formula (Config.SuspicionTimeoutFor). Suspicions are kept
//     per (member, incarnation).
//   - Confirm with the origin (DAOS §1.10): when a suspicion this member
//     only heard of reaches its deadline, it is not declared dead at once:
//     the member asks the accuser to ping the suspect (a PingReq) and pings
//     the suspect itself, and declares it dead only if neither answers
//     within IndirectTimeout.
//   - Own delays (DAOS's progress-stall rule): an input that comes more
//     than StallThreshold after Next means the machine itself was not run
//     (its process was stopped, starved or paused); every deadline moves
//     by the time since the previous input, keeping what it had left, so
//     the machine does not blame others for its own absence.
//   - Own network outages (DAOS's outage rule): a member that has
//     received nothing for 2/3 of SuspicionTimeout while two or more other
//     members are not dead declares nobody dead until messages come again;
//     then every suspicion starts over with a full timeout, so the
//     suspects can refute now that they can be heard. (With one other
//     member, silence is what its crash looks like, and the rule is off.)
//   - Untrusted senders (DAOS-17111): from an unknown member or one dead
//     here, only updates about this member (so it can refute) and the
//     sender's own Alive (so it can rejoin) are taken.
//
// # Defaults and where they come from
//
//	Period               1 s     DAOS SWIM_PROTOCOL_PERIOD_LEN; memberlist LAN ProbeInterval
//	PingTimeout          900 ms  DAOS SWIM_PING_TIMEOUT
//	IndirectTimeout      1.8 s   2·PingTimeout, DAOS's IREQ timeout
//	IndirectPings        2       DAOS SWIM_SUBGROUP_SIZE (memberlist: 3)
//	SuspicionTimeout     20 s    DAOS SWIM_SUSPECT_TIMEOUT (DAOS-14027): unconfirmed
//	SuspicionMinTimeout  4·max(1,log10 n)·Period, ≤ 20 s: memberlist LAN SuspicionMult 4
//	Confirmations        2       memberlist LAN (SuspicionMult−2), ≤ n−2
//	MaxPiggyback         8       DAOS SWIM_PIGGYBACK_ENTRIES (plus 3 mandatory)
//	RetransmitMult       4       memberlist LAN (16 sends at n=1000)
//	AwarenessMax         8       memberlist AwarenessMaxMultiplier
//	StallThreshold       250 ms  Period/4
//
// DAOS's knobs keep DAOS's values, so a ferry rank behaves like a CaRT rank
// with the same settings; the Lifeguard mechanisms DAOS lacks take
// memberlist's LAN values. See DetectionTime for what they give.
//
// # Detection time
//
// DetectionTime gives the arithmetic. With the defaults a failed probe
// takes 2.7 s, a suspicion confirmed twice 4·max(1, log10 n) s and an
// unconfirmed one 20 s; a crashed member of a group of up to 8 is known
// dead to every live member within (n−1)·1 s + 2.7 s + 20 s ≤ 29.7 s
// whatever the gossip does, and in any group within
// 14 s + 2.7 s + 2·ceil(log3 n) s + 20 s + 1.8 s with probability 1−10⁻⁶
// (52.5 s at n = 1,024); the expected time to the first death is
// 1.6 s + 2.7 s + the confirmed suspicion (9.1 s at n = 16, 16.3 s at
// n = 1,024).
//
// Pauses: a member stopped for less than about the confirmed suspicion
// timeout (4 s in small groups, 12 s at n = 1,024) is suspected but
// refutes when it resumes (it hears of the suspicion in the first message
// it gets) before anyone declares it dead; while stopped, it accuses no
// one for its own absence.
//
// # Memory and cost
//
// A machine holds 9 bytes per member while its members are the ranks
// 0…n (incarnation and state in parallel slices, no map: a group built
// rank by rank), 13 once the IDs must be written out; plus about 3.5 KB of
// its own (the Machine, and room for its outbox, queue and suspicions),
// its suspicions (80 bytes each), its dissemination queue (at most
// QueueLimit entries of 40 bytes) and the ping-reqs it serves (at most
// HelperLimit). Per period it sends about two messages (its ping and
// its answer to one) of at most 12+17·(3+MaxPiggyback) = 199 bytes with the
// defaults; no per-tick work grows with the group beyond skipping dead
// members in the probe order.
//
// # Driving it
//
// Call Tick at Next (and whenever convenient: an early Tick is harmless),
// Receive for each message, then drain Outbox and Events; the slices they
// return stay valid until their next call. Time must not go backwards (an
// earlier now is taken as the last one). A Machine is not safe for
// concurrent use: one goroutine, or one lock, per machine.
//
// Over request/reply RPCs (as CaRT carries SWIM): Ping and PingReq are
// requests; an Ack or Nack to member X with Seq s answers X's request with
// Seq s. A Ping is answered in the same Receive; a PingReq later, when the
// helper hears from the target or gives up (one answer per PingReq). A
// transport that fails to send a message tells the machine with
// SendFailed. Acks and nacks may as well travel as one-way messages: the
// machine matches them by Seq and Target, not by connection.
//
// # Wire format
//
// Message.Append and DecodeMessage give a little-endian layout of a 12-byte
// header and 17 bytes per update (see MaxUpdates); it is ferry's own, not
// CaRT's Mercury encoding.
package swim
