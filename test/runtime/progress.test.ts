/**
 * `LatestThrottle` (src/runtime/progress.ts): the few values of an ordinary call all delivered, in
 * order, one at a time; a flood coalesced to a bounded number waiting, the latest always delivered;
 * an interval between deliveries; nothing after `close`.
 */
import { describe, expect, it, vi } from "vitest"
import { LatestThrottle } from "../../src/runtime/progress.js"
import { within } from "../support/index.js"

/** A delivery that is held until released, as a send to a slow client is. */
const heldDeliveries = () => {
  const delivered: number[] = []
  const releases: Array<() => void> = []
  const deliver = (value: number) => {
    delivered.push(value)
    return new Promise<void>((resolve) => releases.push(resolve))
  }
  const releaseAll = async () => {
    for (let i = 0; i < 100_000 && releases.length > 0; i++) {
      releases.shift()?.()
      await new Promise((resolve) => setImmediate(resolve))
    }
  }
  return { delivered, deliver, releaseAll }
}

describe("LatestThrottle", () => {
  it("delivers up to `keep` values pushed while one is being delivered, in order", async () => {
    const { delivered, deliver, releaseAll } = heldDeliveries()
    const throttle = new LatestThrottle(0, deliver, 16)
    for (let i = 1; i <= 8; i++) throttle.push(i)
    expect(delivered).toEqual([1])
    await releaseAll()
    expect(delivered).toEqual([1, 2, 3, 4, 5, 6, 7, 8])
  })

  it("past `keep` waiting, a value replaces the last one waiting: a flood is bounded, and its latest value delivered", async () => {
    const { delivered, deliver, releaseAll } = heldDeliveries()
    const throttle = new LatestThrottle(0, deliver, 4)
    for (let i = 1; i <= 10_000; i++) throttle.push(i)
    await releaseAll()
    expect(delivered).toEqual([1, 2, 3, 4, 10_000])
  })

  it("with `keep` 1, keeps only the latest; at most one delivery per interval", () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "performance"] })
    try {
      const delivered: number[] = []
      const throttle = new LatestThrottle(50, (value: number) => void delivered.push(value))
      for (let i = 1; i <= 100; i++) throttle.push(i)
      expect(delivered).toEqual([1])
      vi.advanceTimersByTime(49)
      expect(delivered).toEqual([1])
      vi.advanceTimersByTime(1)
      expect(delivered).toEqual([1, 100])
      throttle.push(101)
      vi.advanceTimersByTime(49)
      expect(delivered).toEqual([1, 100])
      vi.advanceTimersByTime(1)
      expect(delivered).toEqual([1, 100, 101])
      throttle.close()
    } finally {
      vi.useRealTimers()
    }
  })

  it("drain delivers what waits, then closes; a delivery that never settles ends it at its bound", async () => {
    const { delivered, deliver, releaseAll } = heldDeliveries()
    const throttle = new LatestThrottle(0, deliver, 16)
    for (let i = 1; i <= 4; i++) throttle.push(i)
    const drained = throttle.drain(5_000)
    await releaseAll()
    await drained
    expect(delivered).toEqual([1, 2, 3, 4])
    throttle.push(5)
    expect(delivered).toEqual([1, 2, 3, 4])

    const stuck = new LatestThrottle(0, (_: number) => new Promise<void>(() => undefined), 16)
    stuck.push(1)
    stuck.push(2)
    await within(stuck.drain(100), 5_000, "the drain's bound")
    stuck.push(3)
  })

  it("a second drain is the first one, and close ends a drain under way at once", async () => {
    const stuck = new LatestThrottle(0, (_: number) => new Promise<void>(() => undefined), 16)
    stuck.push(1)
    stuck.push(2)
    const drained = stuck.drain(60_000)
    expect(stuck.drain(60_000)).toBe(drained)
    stuck.close()
    await within(drained, 1_000, "the drain, ended by close")
  })

  it("a delivery that throws does not stop the ones waiting behind it", async () => {
    const delivered: number[] = []
    let busy: (() => void) | undefined
    const throttle = new LatestThrottle(
      0,
      (value: number) => {
        if (value === 1) return new Promise<void>((resolve) => (busy = resolve))
        if (value === 2) throw new Error("the client went away")
        delivered.push(value)
      },
      16
    )
    for (let i = 1; i <= 4; i++) throttle.push(i)
    busy?.()
    await within(throttle.drain(5_000), 1_000, "the drain")
    expect(delivered).toEqual([3, 4])
  })

  it("delivers nothing after close", async () => {
    const { delivered, deliver, releaseAll } = heldDeliveries()
    const throttle = new LatestThrottle(0, deliver, 16)
    throttle.push(1)
    throttle.push(2)
    throttle.close()
    throttle.push(3)
    await releaseAll()
    expect(delivered).toEqual([1])
  })
})
