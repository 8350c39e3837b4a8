package sim

import (
	"fmt"
	"math/rand"
	"time"

	"github.com/asyncrl/asyncrl/actors/trainer/steprule"
	"github.com/asyncrl/asyncrl/cluster/term"
	"github.com/asyncrl/asyncrl/messages"
)

// The term's trainer in the failover world steps the production step rule
// (actors/trainer/steprule.NewRetrying with the run's default Retry,
// publishRetry: the same source of truth as the default world's trainer
// and cluster/node's). As in cluster/node:
//   - a step's publish writes the version to the term's weight bucket (a
//     JetStream object store, cluster/node/remote.go): a node cut off from
//     the store (store-partition, the store side of a quorum loss) or a
//     bucket without a leader (weight-bucket-outage) fails the write after
//     storeBudget, and the publish fails. Once written, the publish goes
//     to the term's publisher shell and returns only when an engine
//     serves the version (failover_publish.go: the tracker core, as
//     weightsync.Sync runs it); no engine is not a failure there: with
//     remote engines the publish waits for one (weightsync.Remote's
//     WaitEngines, WaitServed), so it is not one here;
//   - only a published step is fed to the term (the trainer's OnStep
//     runs after the publish returned; the agent feeds Steps): Announce
//     is where the term hears StepTrained;
//   - a give-up is the trainer's Err, which the agent turns into
//     term.Failed for that node's term (cluster/agent/term.go poll): the
//     term ends, the cluster goes on (another node may take the lease).

// pipeTrainer is a term's trainer: its rule (made on the first batch),
// the RetryAt a timer is set for, each step's groups (its batch), the
// local versions whose bucket write succeeded, how often each step
// trained, and the newest step announced.
type pipeTrainer struct {
	rule      *steprule.Core
	armed     time.Time
	batches   map[int64][]*pgroup
	written   map[int64]bool
	trained   map[int64]int
	announced int64
}

func (p *pipe) rule() *steprule.Core {
	if p.tr.rule == nil {
		p.tr.rule = newRule(0) // a term's trainer starts at its local version 0
		p.tr.batches, p.tr.written, p.tr.trained = map[int64][]*pgroup{}, map[int64]bool{}, map[int64]int{}
	}
	return p.tr.rule
}

// ruleIdle: nothing trains, waits or is held unpublished.
func (p *pipe) ruleIdle() bool {
	r := p.rule()
	held, _ := r.Unpublished()
	return r.Training() == 0 && r.Waiting() == 0 && held == 0
}

// receive hands the rule the next step's batch.
func (p *pipe) receive(batch []*pgroup) {
	step := p.rule().Version() + 1
	ids := make([]string, len(batch))
	for i, g := range batch {
		ids[i] = g.id
	}
	p.tr.batches[step] = batch
	p.stepRule(steprule.Received{Batch: messages.TrainBatch{Header: messages.Header{RunID: runID, Sender: "controller", Version: step - 1},
		Step: step, GroupIDs: ids}})
}

// stepRule steps the rule, carries out its Ready and hands it the next
// batch once it is idle.
func (p *pipe) stepRule(in steprule.Input) {
	p.rule().Step(p.node.w.now(), in)
	p.applyRule()
	p.train()
}

// applyRule carries out the rule's Ready until it is empty, then sets a
// timer for its RetryAt.
func (p *pipe) applyRule() {
	r := p.rule()
	for {
		rd := r.Ready()
		if rd.Empty() {
			break
		}
		r.Advance()
		for _, e := range rd.Effects {
			p.doRule(e)
		}
	}
	p.armRetry()
}

// armRetry sets a timer for the rule's RetryAt on the virtual clock; it
// dies with the node's incarnation and does nothing once the pipeline
// stopped or the rule no longer waits for that time.
func (p *pipe) armRetry() {
	n, r := p.node, p.rule()
	at := r.RetryAt()
	if at.IsZero() || at.Equal(p.tr.armed) || p.stopped {
		return
	}
	p.tr.armed = at
	if n.w.active > 0 {
		// A publish that failed in a fault waits out its backoff after
		// the fault heals (up to 32 s before the sixth try), longer than
		// ProgressBound: progress is owed from the end of that wait.
		n.w.retryQuiet = max(n.w.retryQuiet, at.Sub(n.w.t0))
	}
	step, _ := r.Unpublished()
	n.later(max(0, at.Sub(n.w.now())), fmt.Sprintf("%s: trainer of token %d: step %d: retry wait over", n.name, p.token, step), func() {
		if p.stopped || n.pipe != p || !r.RetryAt().Equal(at) {
			return
		}
		p.tr.armed = time.Time{}
		r.Tick(n.w.now())
		p.applyRule()
		p.train()
	})
}

func (p *pipe) doRule(e steprule.Effect) {
	w := p.node.w
	switch v := e.(type) {
	case steprule.Train:
		p.trainStep(v.Batch.Step)
	case steprule.Publish:
		w.pubRetries++
		w.logf("%s: trainer of token %d: step %d: publish of version %d tried again", p.node.name, p.token, v.Step, v.Version)
		if w.cfg.has(BugTrainerRetrainsOnRetry) {
			// The planted bug: the retry trains the step's batch again.
			w.logf("%s: trainer of token %d: step %d: retry trains the batch again (planted bug)", p.node.name, p.token, v.Step)
			p.trainStep(v.Step)
			return
		}
		p.publish(v.Step)
	case steprule.Announce:
		p.announce(v)
	case steprule.Refuse:
		w.fail(InvProtocol, "%s: trainer of token %d: %v", p.node.name, p.token, v.Err())
	case steprule.GiveUp:
		p.giveUp(v)
	}
}

// trainStep trains step for the modelled time, then publishes it; a step
// is trained once (InvTrainedTwice): a failed publish is tried again with
// the same weights.
func (p *pipe) trainStep(step int64) {
	n, w := p.node, p.node.w
	n.later(w.jitter(200*msec, 800*msec), "", func() {
		if p.stopped || n.pipe != p {
			return // the trainer stopped with its pipeline
		}
		w.checks++
		if p.tr.trained[step]++; p.tr.trained[step] > 1 {
			w.fail(InvTrainedTwice, "%s: trainer of token %d trained step %d %d times", n.name, p.token, step, p.tr.trained[step])
			return
		}
		p.local = step
		var ids []string
		for _, g := range p.tr.batches[step] {
			g.state = "trained"
			ids = append(ids, g.id)
		}
		w.logf("%s: trainer step %d (version %d) of token %d from %v", n.name, step, p.base.Version+step, p.token, ids)
		p.publish(step)
	})
}

// publish writes the step's version to the term's weight bucket, then
// hands it to the term's publisher shell, which dispatches it and waits
// for an engine to serve it (failover_publish.go); the rule hears Trained
// once that publish returns, or Failed when the store was out of reach
// for storeBudget.
func (p *pipe) publish(step int64) {
	n, w := p.node, p.node.w
	ver := p.base.Version + step
	n.bucketOp(fmt.Sprintf("publish version %d of token %d", ver, p.token), func() {
		if p.stopped || n.pipe != p {
			return
		}
		p.tr.written[step] = true
		p.publishWritten(step)
	}, func() {
		if p.stopped || n.pipe != p {
			return
		}
		if w.cfg.has(BugTrainerAnnouncesUnpublished) {
			// The planted bug: the failed publish reported as a success.
			w.logf("%s: trainer of token %d: step %d: publish failed, reported trained (planted bug)", n.name, p.token, step)
			p.stepRule(steprule.Trained{Step: step, Version: step})
			return
		}
		p.stepRule(steprule.Failed{Step: step, Version: step, Err: "the term's weight bucket is unreachable"})
	})
}

// announce: the published step reaches the term (StepTrained, its
// checkpoint), as the agent feeds the trainer's Steps. InvAnnounce: the
// step's version was written to the bucket, and an engine's ack of it
// (or of a later version) reached the term's publisher.
func (p *pipe) announce(a steprule.Announce) {
	n, w := p.node, p.node.w
	if a.Again {
		return // the pipe sends no retransmission; nothing to say again
	}
	w.checks += 2
	ver := p.base.Version + a.Version
	if !p.tr.written[a.Version] {
		w.fail(InvAnnounce, "%s: trainer of token %d announces step %d (version %d), whose publish failed: the term would record weights no engine can get",
			n.name, p.token, a.Step, ver)
		return
	}
	if !p.ackedAtLeast(ver) {
		w.fail(InvAnnounce, "%s: trainer of token %d announces step %d (version %d), which no engine of the term has acked: its publish returned before an engine served it",
			n.name, p.token, a.Step, ver)
		return
	}
	p.tr.announced = max(p.tr.announced, a.Step)
	var ids []string
	for _, g := range p.tr.batches[a.Step] {
		ids = append(ids, g.id)
	}
	delete(p.tr.batches, a.Step)
	n.stepTrained(term.StepTrained{Token: p.token, Step: a.Step, Version: a.Version, Groups: ids})
	n.step(term.CheckpointSaved{Token: p.token, Version: a.Version, Location: fmt.Sprintf("ckpt/t%d/v%d", p.token, a.Version)})
	n.maybeStopAtLast(p)
}

// giveUp: the rule gave a step up; the trainer's Err fails this node's
// term (term.Failed), and the lease goes on to whoever takes it.
func (p *pipe) giveUp(g steprule.GiveUp) {
	n, w := p.node, p.node.w
	w.gaveUp = max(w.gaveUp, p.base.Step+g.Step)
	w.giveUps++
	w.logf("%s: trainer of token %d: %s: the term fails on the trainer's error", n.name, p.token, g)
	w.checks += 2
	if want := publishRetry().Attempts; g.Attempts != want {
		w.fail(InvAnnounce, "%s: the step rule gave up step %d after %d publish tries, the run's config says %d", n.name, g.Step, g.Attempts, want)
		return
	}
	if p.tr.announced >= g.Step {
		w.fail(InvAnnounce, "%s: the step rule gave up step %d, which the trainer announced", n.name, g.Step)
		return
	}
	n.step(term.Failed{Token: p.token, Err: "trainer: " + g.String()})
}

// FaultBucketOutage: the cluster's weight buckets have no leader (their
// stream's servers lost): every publish's write waits, then fails, while
// the progress store and the ledger go on.
const FaultBucketOutage FaultKind = "weight-bucket-outage"

// bucketSalt seeds the bucket-outage draw's stream (seed ^ bucketSalt): a
// stream of its own, so every other draw of the failover world stays as
// it was.
const bucketSalt = 0x0031_b0c7_e700

// drawBucketOutage appends, to one failover seed in six, a weight-bucket
// outage. Two in three are short (4–20 s: the publishes meanwhile fail
// and the step rule tries them again until one succeeds); one in three
// outlasts a term's tries (6 writes of up to storeBudget, waits
// 2+4+8+16+32 s: about 80 s): 85–105 s, so a term's trainer gives its
// step up, the term fails and another term takes over.
func drawBucketOutage(cfg Config, base int) []*foFault {
	rng := rand.New(rand.NewSource(cfg.Seed ^ bucketSalt))
	if rng.Intn(6) != 0 {
		return nil
	}
	dur := 4*time.Second + time.Duration(rng.Int63n(int64(16*time.Second)))
	if rng.Intn(3) == 0 {
		dur = 85*time.Second + time.Duration(rng.Int63n(int64(20*time.Second)))
	}
	horizon := time.Duration(cfg.Steps) * 700 * msec
	f := &foFault{idx: base, kind: FaultBucketOutage, at: 500*msec + time.Duration(rng.Int63n(int64(horizon))), dur: dur}
	f.enabled = cfg.faultMask == nil || (f.idx < len(cfg.faultMask) && cfg.faultMask[f.idx])
	return []*foFault{f}
}

// bucketOp runs op at the weight bucket after a delay, retrying while
// this node is cut off from the store or the bucket is out; after
// storeBudget it gives up with failed (storeOp's timing).
func (n *tnode) bucketOp(what string, op, failed func()) {
	n.remoteOp(what, "the weight bucket is unreachable", func() bool { return n.storeCut > 0 || n.w.bucketOut > 0 }, op, failed)
}

// giveUpAfter is how long after a step trained its trainer gives it up
// when every publish fails, each write failing after storeBudget: found
// by stepping the production rule itself (its waits: publishRetry).
func giveUpAfter() time.Duration {
	r := newRule(0)
	now := time.Time{}
	r.Step(now, steprule.Received{Batch: messages.TrainBatch{Step: 1}})
	for range publishRetry().Attempts {
		now = now.Add(storeBudget + 150*msec) // bucketOp's longest failing write
		r.Step(now, steprule.Failed{Step: 1, Version: 1, Err: "unreachable"})
		if at := r.RetryAt(); !at.IsZero() {
			now = at
			r.Tick(now)
		}
	}
	return now.Sub(time.Time{})
}
