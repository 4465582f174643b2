package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/ferrymsg/ferry/coll"
	"github.com/ferrymsg/ferry/sim"
)

// runSim is `ferry sim`: the deterministic simulator of a SWIM group.
func runSim(ctx context.Context, e *env, args []string) int {
	fs := newFlagSet(e, "sim")
	ranks := fs.Int("ranks", 256, "number of ranks in the group")
	seed := fs.Uint64("seed", 1, "seed of every random choice (one seed, one trace)")
	duration := fs.Duration("duration", time.Minute, "simulated time to run (a Go duration)")
	loss := fs.Float64("loss", 0, "probability, 0 to 1, that a message is lost")
	kill := fs.Int("kill", 0, "ranks that crash, at seeded times in the first half of the run")
	pause := fs.Int("pause", 0, "other ranks paused as by SIGSTOP, at seeded times in the first half of the run")
	pauseFor := fs.Duration("pause-for", 0, "how long each pause lasts (0: a seeded quarter to half of the suspicion timeout)")
	delayMin := fs.Duration("delay-min", sim.DefaultDelayMin, "shortest one-way message delay")
	delayMax := fs.Duration("delay-max", sim.DefaultDelayMax, "longest one-way message delay, above 0 (delays are uniform in between)")
	collEvery := fs.Duration("coll-every", 10*time.Second, "start a collective (broadcast and sum over the group) every this much simulated time (0: none)")
	collTopo := fs.String("coll-topo", "knomial:4", "the collectives' tree: flat, kary:K or knomial:K")
	collTimeout := fs.Duration("coll-timeout", sim.DefaultCollTimeout, "a collective's deadline at its root")
	codec := fs.String("codec", "bytes", "how messages travel: bytes (swim's codec) or struct (copied)")
	tracePath := fs.String("trace", "", "write the canonical trace (what the trace hash covers) to this file")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	asJSON := fs.Bool("json", false, "print one JSON object on stdout instead of text")
	verbose := fs.Bool("verbose", false, "log debug messages")
	pos, code, ok := parseFlags(e, fs, args)
	if !ok {
		return code
	}
	cfg := sim.Config{
		Ranks:    *ranks,
		Seed:     *seed,
		Duration: *duration,
		Network:  sim.Network{DelayMin: *delayMin, DelayMax: *delayMax, Loss: *loss},
		Faults:   sim.Faults{Kill: *kill, Pause: *pause, PauseFor: *pauseFor},
	}
	topo, err := parseTopology(*collTopo)
	if err != nil {
		return usageError(e, fs, "--coll-topo: %v", err)
	}
	cfg.Collectives = sim.Collectives{Every: *collEvery, Topology: topo, Timeout: *collTimeout}
	switch *codec {
	case "bytes":
		cfg.Codec = sim.CodecBytes
	case "struct":
		cfg.Codec = sim.CodecStruct
	default:
		return usageError(e, fs, "--codec must be bytes or struct, not %q", *codec)
	}
	switch {
	case len(pos) != 0:
		return usageError(e, fs, "no arguments expected, got %q", pos)
	case *ranks < 1:
		return usageError(e, fs, "--ranks must be at least 1")
	case *duration <= 0:
		return usageError(e, fs, "--duration must be positive")
	case !(*loss >= 0 && *loss <= 1):
		return usageError(e, fs, "--loss must be a probability from 0 to 1")
	case *kill < 0 || *pause < 0 || *kill+*pause > *ranks:
		return usageError(e, fs, "--kill and --pause must not be negative, and together at most --ranks")
	case *pauseFor < 0:
		return usageError(e, fs, "--pause-for must not be negative")
	case *delayMin < 0 || *delayMax < *delayMin || *delayMax == 0:
		return usageError(e, fs, "want 0 <= --delay-min <= --delay-max, and --delay-max above 0 (the simulator's messages take some time)")
	case *collEvery < 0 || *collTimeout < 0:
		return usageError(e, fs, "--coll-every and --coll-timeout must not be negative")
	}
	log := newLogger(e, *verbose)
	if *tracePath != "" {
		f, err := os.Create(*tracePath)
		if err != nil {
			fmt.Fprintf(e.stderr, "ferry sim: %v\n", err)
			return exitError
		}
		defer f.Close()
		cfg.Trace = f
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintf(e.stderr, "ferry sim: %v\n", err)
			return exitError
		}
		defer f.Close()
		cfg.Started = func() {
			if err := pprof.StartCPUProfile(f); err != nil {
				log.Error("cpu profile", "err", err)
			}
		}
		defer pprof.StopCPUProfile()
	}
	log.Debug("sim starting", "ranks", cfg.Ranks, "seed", cfg.Seed, "duration", cfg.Duration)
	res, err := sim.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(e.stderr, "ferry sim: %v\n", err)
		return exitError
	}
	log.Debug("sim done", "setup", res.Setup, "wall", res.Wall, "events", res.Events)
	if *asJSON {
		writeJSON(e, newSimReport(res, &cfg))
	} else {
		printSimText(e, res, &cfg)
	}
	return exitOK
}

// simReport is `ferry sim --json`.
type simReport struct {
	Ranks                 int     `json:"ranks"`
	Seed                  uint64  `json:"seed"`
	Loss                  float64 `json:"loss"`
	Codec                 string  `json:"codec"`
	PeriodMS              float64 `json:"period_ms"`
	Killed                int     `json:"killed"`
	Paused                int     `json:"paused"`
	DetectedByAll         int     `json:"detected_by_all"`
	FalsePositives        int     `json:"false_positives"`
	FalseDeclarations     int     `json:"false_declarations"`
	DetectPeriodsMax      float64 `json:"detect_periods_max"`
	FirstDetectPeriodsMax float64 `json:"first_detect_periods_max"`
	MsgsPerRankPeriod     float64 `json:"msgs_per_rank_period"`
	Sent                  uint64  `json:"sent"`
	Delivered             uint64  `json:"delivered"`
	Dropped               uint64  `json:"dropped"`
	DecodeErrors          uint64  `json:"decode_errors"`
	Events                uint64  `json:"events"`
	SimSeconds            float64 `json:"sim_seconds"`
	SetupSeconds          float64 `json:"setup_seconds"`
	WallSeconds           float64 `json:"wall_seconds"`
	SimPerWall            float64 `json:"sim_per_wall"`
	CPUSeconds            float64 `json:"cpu_seconds"`
	SimPerCPU             float64 `json:"sim_per_cpu"`
	PeakRSSMB             float64 `json:"peak_rss_mb"`
	TraceHash             string  `json:"trace_hash"`

	CollectivesRun      int       `json:"collectives_run"`
	CollFinished        int       `json:"collectives_finished"`
	CollAggregateOK     int       `json:"collectives_aggregate_ok"`
	CollReachMin        float64   `json:"coll_reach_min"`
	CollReachMean       float64   `json:"coll_reach_mean"`
	CollLatencyMeanMS   float64   `json:"coll_latency_mean_ms"`
	CollLatencyMaxMS    float64   `json:"coll_latency_max_ms"`
	CollMsgs            uint64    `json:"coll_msgs"`
	CollTopology        string    `json:"coll_topology,omitempty"`
	CollectivesDetailed []simColl `json:"collectives"`

	Crashes []simCrash `json:"crashes"`
	Pauses  []simPause `json:"pauses"`
}

type simColl struct {
	Root        int     `json:"root"`
	At          float64 `json:"at_s"`
	Scope       int     `json:"scope"`
	Excluded    int     `json:"excluded"`
	Live        int     `json:"live"`
	Answered    int     `json:"answered"`
	Failed      int     `json:"failed"`
	Unreachable int     `json:"unreachable"`
	TimedOut    int     `json:"timed_out"`
	LatencyMS   float64 `json:"latency_ms"` // -1: never finished
	AggregateOK bool    `json:"aggregate_ok"`
}

type simCrash struct {
	Rank int     `json:"rank"`
	At   float64 `json:"at_s"`
	// Latencies from the crash, in seconds and periods; -1 for never.
	FirstDetectedS       float64 `json:"first_detected_s"`
	FirstDetectedPeriods float64 `json:"first_detected_periods"`
	FirstBy              int     `json:"first_by"`
	KnownByAllS          float64 `json:"known_by_all_s"`
	KnownByAllPeriods    float64 `json:"known_by_all_periods"`
	Known                int     `json:"known"`
	Live                 int     `json:"live"`
}

type simPause struct {
	Rank         int     `json:"rank"`
	At           float64 `json:"at_s"`
	For          float64 `json:"for_s"`
	Suspected    int     `json:"suspected_by"`
	DeclaredDead int     `json:"declared_dead_by"`
}

func newSimReport(r *sim.Result, cfg *sim.Config) *simReport {
	rep := &simReport{
		Ranks:                 r.Ranks,
		Seed:                  r.Seed,
		Loss:                  cfg.Network.Loss,
		Codec:                 r.Codec.String(),
		PeriodMS:              float64(r.Period) / float64(time.Millisecond),
		Killed:                len(r.Crashes),
		Paused:                len(r.Pauses),
		DetectedByAll:         r.DetectedByAll,
		FalsePositives:        r.FalsePositives,
		FalseDeclarations:     r.FalseDeclarations,
		DetectPeriodsMax:      r.DetectPeriodsMax(),
		FirstDetectPeriodsMax: r.FirstDetectPeriodsMax(),
		MsgsPerRankPeriod:     r.MsgsPerRankPeriod(),
		Sent:                  r.Sent,
		Delivered:             r.Delivered,
		Dropped:               r.Dropped,
		DecodeErrors:          r.DecodeErrors,
		Events:                r.Events,
		SimSeconds:            r.Duration.Seconds(),
		SetupSeconds:          r.Setup.Seconds(),
		WallSeconds:           r.Wall.Seconds(),
		SimPerWall:            r.SimPerWall(),
		CPUSeconds:            r.CPU.Seconds(),
		SimPerCPU:             r.SimPerCPU(),
		PeakRSSMB:             float64(r.PeakRSS) / (1 << 20),
		TraceHash:             r.TraceHash,
		CollMsgs:              r.CollMsgs,
		CollectivesDetailed:   []simColl{},
		Crashes:               []simCrash{},
		Pauses:                []simPause{},
	}
	cs := r.CollSummary()
	rep.CollectivesRun, rep.CollFinished, rep.CollAggregateOK = cs.Run, cs.Finished, cs.AggregateOK
	rep.CollReachMin, rep.CollReachMean = cs.ReachMin, cs.ReachMean
	rep.CollLatencyMeanMS, rep.CollLatencyMaxMS = ms(cs.LatencyMean), ms(cs.LatencyMax)
	if cfg.Collectives.Every > 0 {
		rep.CollTopology = cfg.Collectives.Topology.String()
	}
	for _, c := range r.Colls {
		if c.Root < 0 {
			continue
		}
		lat := -1.0
		if c.Latency >= 0 {
			lat = ms(c.Latency)
		}
		rep.CollectivesDetailed = append(rep.CollectivesDetailed, simColl{Root: c.Root, At: c.Start.Seconds(), Scope: c.Scope, Excluded: c.Excluded,
			Live: c.Live, Answered: c.Answered, Failed: c.Failed, Unreachable: c.Unreachable, TimedOut: c.TimedOut, LatencyMS: lat, AggregateOK: c.AggregateOK})
	}
	for _, c := range r.Crashes {
		sc := simCrash{Rank: c.Rank, At: c.At.Seconds(), FirstBy: c.FirstBy, Known: c.Known, Live: c.Live,
			FirstDetectedS: -1, FirstDetectedPeriods: -1, KnownByAllS: -1, KnownByAllPeriods: -1}
		if c.FirstDetected >= 0 {
			sc.FirstDetectedS = (c.FirstDetected - c.At).Seconds()
			sc.FirstDetectedPeriods = r.Periods(c.FirstDetected - c.At)
		}
		if c.KnownByAll >= 0 {
			sc.KnownByAllS = (c.KnownByAll - c.At).Seconds()
			sc.KnownByAllPeriods = r.Periods(c.KnownByAll - c.At)
		}
		rep.Crashes = append(rep.Crashes, sc)
	}
	for _, p := range r.Pauses {
		rep.Pauses = append(rep.Pauses, simPause{Rank: p.Rank, At: p.At.Seconds(), For: p.For.Seconds(), Suspected: p.Suspected, DeclaredDead: p.DeclaredDead})
	}
	return rep
}

func printSimText(e *env, r *sim.Result, cfg *sim.Config) {
	w := e.stdout
	fmt.Fprintf(w, "sim: %d ranks, seed %d, %v simulated, loss %g, protocol period %v, codec %v\n",
		r.Ranks, r.Seed, r.Duration, cfg.Network.Loss, r.Period, r.Codec)
	fmt.Fprintf(w, "crashes: %d, known dead to every live rank: %d\n", len(r.Crashes), r.DetectedByAll)
	for _, c := range r.Crashes {
		fmt.Fprintf(w, "  rank %d crashed at %.3fs: ", c.Rank, c.At.Seconds())
		if c.FirstDetected < 0 {
			fmt.Fprintf(w, "never detected")
		} else {
			d := c.FirstDetected - c.At
			fmt.Fprintf(w, "first detected %.3fs later (%.2f periods) by rank %d", d.Seconds(), r.Periods(d), c.FirstBy)
		}
		if c.KnownByAll < 0 {
			fmt.Fprintf(w, "; known dead to %d of %d live ranks at the end\n", c.Known, c.Live)
		} else {
			d := c.KnownByAll - c.At
			fmt.Fprintf(w, "; known to all %d live ranks %.3fs later (%.2f periods)\n", c.Live, d.Seconds(), r.Periods(d))
		}
	}
	if len(r.Pauses) > 0 {
		fmt.Fprintf(w, "pauses: %d\n", len(r.Pauses))
		for _, p := range r.Pauses {
			fmt.Fprintf(w, "  rank %d paused at %.3fs for %.3fs: suspected by %d ranks, declared dead by %d\n",
				p.Rank, p.At.Seconds(), p.For.Seconds(), p.Suspected, p.DeclaredDead)
		}
	}
	fmt.Fprintf(w, "false positives: %d ranks declared dead while alive (%d declarations)\n", r.FalsePositives, r.FalseDeclarations)
	fmt.Fprintf(w, "messages per rank per period: %.3f (%d sent, %d delivered, %d dropped)\n",
		r.MsgsPerRankPeriod(), r.Sent, r.Delivered, r.Dropped)
	if cs := r.CollSummary(); cs.Run > 0 {
		fmt.Fprintf(w, "collectives (%v): %d run, %d finished, %d with the right aggregate; reach min %.2f%% mean %.2f%% of live ranks; latency mean %.1f ms, max %.1f ms (%d messages)\n",
			cfg.Collectives.Topology, cs.Run, cs.Finished, cs.AggregateOK, 100*cs.ReachMin, 100*cs.ReachMean, ms(cs.LatencyMean), ms(cs.LatencyMax), r.CollMsgs)
	} else {
		fmt.Fprintf(w, "collectives: none\n")
	}
	if r.DecodeErrors > 0 {
		fmt.Fprintf(w, "decode errors: %d\n", r.DecodeErrors)
	}
	fmt.Fprintf(w, "speed: %.3fs simulated in %.3fs wall: %.1f simulated seconds per wall second (setup %.3fs excluded), %d events\n",
		r.Duration.Seconds(), r.Wall.Seconds(), r.SimPerWall(), r.Setup.Seconds(), r.Events)
	if r.CPU > 0 {
		fmt.Fprintf(w, "cpu: %.3fs during the run: %.1f simulated seconds per CPU second\n", r.CPU.Seconds(), r.SimPerCPU())
	}
	fmt.Fprintf(w, "peak RSS: %.1f MB (%.1f KB per rank)\n", float64(r.PeakRSS)/(1<<20), float64(r.PeakRSS)/1024/float64(r.Ranks))
	fmt.Fprintf(w, "trace hash: %s (%d records)\n", r.TraceHash, r.TraceRecords)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// parseTopology parses flat, kary:K or knomial:K.
func parseTopology(s string) (coll.Topology, error) {
	name, ratio, hasRatio := strings.Cut(s, ":")
	var t coll.TreeType
	switch name {
	case "flat":
		return coll.Flat(), nil
	case "kary":
		t = coll.TypeKAry
	case "knomial":
		t = coll.TypeKNomial
	default:
		return 0, fmt.Errorf("unknown tree %q (want flat, kary:K or knomial:K)", s)
	}
	if !hasRatio {
		return 0, fmt.Errorf("%q needs a ratio (%s:K)", s, name)
	}
	k, err := strconv.Atoi(ratio)
	if err != nil {
		return 0, fmt.Errorf("ratio %q: %v", ratio, err)
	}
	return coll.MakeTopology(t, k)
}
