/**
 * The wait under `wait_service` and every "until the service is up" of the runtime (awaitSnapshot):
 * unit tests on a plain XState actor, since what they check is the wait's own bookkeeping: it ends
 * when the status holds even if that happened just before it subscribed, and it never leaves an
 * observer on the actor behind, however it ended.
 */
import { Effect } from "effect"
import { describe, expect, it, vi } from "vitest"
import { createActor, createMachine, type AnyActorRef } from "xstate"
import { awaitSnapshot, awaitSnapshotPromise } from "../../src/runtime/bridge.js"

const light = createMachine({
  id: "light",
  initial: "red",
  states: { red: { on: { NEXT: "green" } }, green: { on: { NEXT: "red" } } }
})

/** The observers an actor holds (XState keeps them in a private set). */
const observers = (actor: AnyActorRef): number => (actor as unknown as { observers: Set<unknown> }).observers.size

describe("awaitSnapshot", () => {
  it("drops its subscription when the status is reached, on a time-out and at an abort", async () => {
    const actor = createActor(light).start()
    const before = observers(actor)
    for (let i = 0; i < 20; i++) {
      const waited = awaitSnapshotPromise(actor, (s) => s.value === "green", { timeoutMs: 5000 })
      await vi.waitFor(() => expect(observers(actor)).toBe(before + 1), { interval: 1 })
      actor.send({ type: "NEXT" })
      expect((await waited).end).toBe("reached")
      actor.send({ type: "NEXT" })
    }
    expect((await awaitSnapshotPromise(actor, (s) => s.value === "blue", { timeoutMs: 10 })).end).toBe("timeout")
    const abort = new AbortController()
    const aborted = awaitSnapshotPromise(actor, (s) => s.value === "blue", { timeoutMs: 5000, signal: abort.signal })
    abort.abort()
    expect((await aborted).end).toBe("aborted")
    expect(observers(actor)).toBe(before)
    actor.stop()
  })

  it("ends when the status came to hold between its first look and its subscription", async () => {
    const actor = createActor(light).start()
    let looks = 0
    // The first look (before subscribing) turns the light green after reading it red: the change lands in that gap.
    const wait = awaitSnapshot(actor, (s) => {
      looks += 1
      const green = s.value === "green"
      if (looks === 1) actor.send({ type: "NEXT" })
      return green
    }, { timeoutMs: 2000 })
    const result = await Effect.runPromise(wait)
    expect(result.end).toBe("reached")
    expect(result.snapshot.value).toBe("green")
    expect(result.elapsedMs).toBeLessThan(1000)
    actor.stop()
  })

  it("ends as stopped when the actor stopped in that gap", async () => {
    const actor = createActor(light).start()
    let looks = 0
    const wait = awaitSnapshot(actor, (s) => {
      if (++looks === 1) actor.stop()
      return s.value === "blue"
    }, { timeoutMs: 2000 })
    const result = await Effect.runPromise(wait)
    expect(result.end).toBe("stopped")
    expect(result.elapsedMs).toBeLessThan(1000)
  })
})
