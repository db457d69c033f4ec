// The writes of the files the store keeps in memory (tool pins, asynchronous calls), coalesced by
// src/config/atomic-write.ts `CoalescedWrites`: a burst of changes is one write after the one under
// way, a failed write does not stop the next, and nothing is written after close.
import { describe, expect, it } from "vitest"
import { CoalescedWrites } from "../../src/config/atomic-write.js"

/** A write that waits until released, counting its runs; `fail` makes the next run reject. */
const heldWrite = () => {
  const releases: Array<() => void> = []
  let runs = 0
  let fail = false
  const write = () =>
    new Promise<void>((resolve, reject) => {
      runs += 1
      const failing = fail
      fail = false
      releases.push(() => (failing ? reject(new Error("disk full")) : resolve()))
    })
  return {
    write,
    runs: () => runs,
    failNext: () => void (fail = true),
    release: async () => {
      releases.shift()?.()
      await new Promise((r) => setImmediate(r))
    }
  }
}

describe("coalesced writes", () => {
  it("a burst during a write is one more write, after it", async () => {
    const held = heldWrite()
    const writes = new CoalescedWrites(held.write)
    const first = writes.persist()
    const queued = [writes.persist(), writes.persist(), writes.persist()]
    expect(held.runs()).toBe(1)
    expect(queued[0]).toBe(queued[2])
    await held.release()
    await first
    expect(held.runs()).toBe(2)
    await held.release()
    await Promise.all(queued)
    expect(held.runs()).toBe(2)
  })

  it("a failed write rejects its callers, and the write queued behind it still runs", async () => {
    const held = heldWrite()
    const writes = new CoalescedWrites(held.write)
    held.failNext()
    const first = writes.persist()
    const queued = writes.persist()
    await held.release()
    await expect(first).rejects.toThrow("disk full")
    expect(held.runs()).toBe(2)
    await held.release()
    await expect(queued).resolves.toBeUndefined()
    // Not wedged: a later change is written again.
    const later = writes.persist()
    expect(held.runs()).toBe(3)
    await held.release()
    await later
  })

  it("close waits for the writes under way and queued; nothing is written after it", async () => {
    const held = heldWrite()
    const writes = new CoalescedWrites(held.write)
    void writes.persist()
    void writes.persist()
    let closed = false
    const closing = writes.close().then(() => (closed = true))
    await held.release()
    expect(closed).toBe(false)
    await held.release()
    await closing
    expect(held.runs()).toBe(2)
    await writes.persist()
    expect(held.runs()).toBe(2)
  })
})
