import { assign, createActor, setup, SimulatedClock, type AnyActorRef } from "xstate"
import { describe, expect, it } from "vitest"
import { indexDelayedEvents } from "../../src/runtime/timers.js"

/** A child that counts ticks of a repeating `after` and can be sent to a waiting state with its own timer. */
const ticker = setup({
  types: { context: {} as { ticks: number }, events: {} as { type: "PAUSE" } | { type: "RESUME" } }
}).createMachine({
  context: { ticks: 0 },
  initial: "running",
  states: {
    running: {
      after: { 1000: { target: "running", reenter: true, actions: assign({ ticks: ({ context }) => context.ticks + 1 }) } },
      on: { PAUSE: "paused" }
    },
    paused: { after: { 60_000: "running" }, on: { RESUME: "running" } }
  }
})

const parent = setup({
  types: { context: {} as { kids: AnyActorRef[] }, events: {} as { type: "NOTHING" } },
  actors: { ticker }
}).createMachine({
  context: ({ spawn }) => ({ kids: Array.from({ length: 50 }, (_, i) => spawn("ticker", { id: `t${i}` })) }),
})

const pendingOf = (root: AnyActorRef) =>
  Object.values((root.system as unknown as { _snapshot: { _scheduledEvents: Record<string, { source: AnyActorRef }> } })._snapshot._scheduledEvents)

const start = () => {
  const clock = new SimulatedClock()
  const root = createActor(parent, { clock })
  indexDelayedEvents(root.system)
  root.start()
  const kids = root.getSnapshot().context.kids
  const ticks = (i: number) => (kids[i]!.getSnapshot() as { context: { ticks: number } }).context.ticks
  // SimulatedClock fires what is due once per increment: step half a second at a time.
  const advance = (ms: number) => {
    for (let t = 0; t < ms; t += 500) clock.increment(Math.min(500, ms - t))
  }
  return { clock, root, kids, ticks, advance }
}

describe("indexDelayedEvents", () => {
  it("delayed events are delivered as without it", () => {
    const { advance, kids, ticks } = start()
    advance(3500)
    expect(kids.map((_, i) => ticks(i))).toEqual(kids.map(() => 3))
  })

  it("a stopped actor's delayed events are cancelled, and only its own", () => {
    const { advance, root, kids, ticks } = start()
    kids[7]!.send({ type: "PAUSE" })
    expect(pendingOf(root).filter((e) => e.source === kids[7])).toHaveLength(1)
    // What a parent's stopChild does to a child.
    ;(kids[7] as unknown as { _stop(): void })._stop()
    ;(kids[3] as unknown as { _stop(): void })._stop()
    expect(pendingOf(root).filter((e) => e.source === kids[7] || e.source === kids[3])).toHaveLength(0)
    expect(pendingOf(root)).toHaveLength(48)
    advance(120_000)
    expect(ticks(3)).toBe(0)
    expect(ticks(7)).toBe(0)
    expect(ticks(4)).toBe(120)
  })

  it("a timer cancelled by leaving its state does not fire; a state entered again schedules anew", () => {
    const { advance, kids, ticks } = start()
    kids[0]!.send({ type: "PAUSE" })
    advance(5000)
    expect(ticks(0)).toBe(0)
    kids[0]!.send({ type: "RESUME" })
    advance(60_000)
    expect(ticks(0)).toBe(60)
    expect(kids[0]!.getSnapshot().value).toBe("running")
  })

  it("stopping the root cancels everything", () => {
    const { advance, root, ticks } = start()
    advance(1000)
    root.stop()
    expect(pendingOf(root)).toHaveLength(0)
    advance(10_000)
    expect(ticks(0)).toBe(1)
  })
})
