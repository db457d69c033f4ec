/**
 * The rules of a Redis outage between replicas (src/cluster/outage.ts), case by case: what a
 * replica that lost Redis concludes from the others' replies, and the bound on the promises a
 * replica keeps. The same rules run against real replicas in cut-off, outage-vouching and
 * slow-redis.
 */
import { describe, expect, it } from "vitest"
import { conclude, MAX_NAMED_LEASES, QuietPromises, type Reply } from "../../src/cluster/outage.js"

const promise = (quietMs: number): Reply => ({ kind: "answered", answer: { up: false, quietMs } })
const reaches: Reply = { kind: "answered", answer: { up: true } }
const silent: Reply = { kind: "silent" }
const refused: Reply = { kind: "refused" }

describe("a replica that lost Redis concludes from the others' replies", () => {
  it("every other replica promised: an outage, kept for the shortest promise", () => {
    expect(conclude(2, [promise(8000), promise(6000)])).toEqual({ settled: true, verdict: "outage", promisedMs: 6000 })
  })

  it("another replica reaches Redis: partitioned, whatever the rest said or did not say", () => {
    expect(conclude(2, [promise(8000), reaches])).toEqual({ settled: true, verdict: "partitioned", promisedMs: 0 })
    expect(conclude(3, [reaches, silent, silent])).toEqual({ settled: true, verdict: "partitioned", promisedMs: 0 })
  })

  it("an answer without a promise (a replica of an earlier version, or none understood) vouches for nothing", () => {
    expect(conclude(1, [{ kind: "answered", answer: null }])).toEqual({ settled: true, verdict: "partitioned", promisedMs: 0 })
    expect(conclude(1, [{ kind: "answered", answer: { up: false } }])).toEqual({ settled: true, verdict: "partitioned", promisedMs: 0 })
  })

  it("no other replica known: alone, nothing kept", () => {
    expect(conclude(0, [])).toEqual({ settled: true, verdict: "alone", promisedMs: 0 })
  })

  it("every other replica refuses connections (gone, taking no lease): alone, nothing kept", () => {
    expect(conclude(2, [refused, refused])).toEqual({ settled: true, verdict: "alone", promisedMs: 0 })
  })

  it("a refusing replica is not waited for beside one that promised", () => {
    expect(conclude(2, [promise(8000), refused])).toEqual({ settled: true, verdict: "outage", promisedMs: 8000 })
  })

  it("one that did not answer in time may reach Redis: nothing is settled while it is missing, even beside a promise", () => {
    expect(conclude(2, [promise(8000), silent])).toEqual({ settled: false, missing: 1 })
    expect(conclude(1, [silent])).toEqual({ settled: false, missing: 1 })
  })

  it("one that has not said where it listens (it starts, and may take leases) counts as missing", () => {
    // Two others known, one asked: the one without an address is missing.
    expect(conclude(2, [promise(8000)])).toEqual({ settled: false, missing: 1 })
    // Not even beside refusals does it let the question settle as "alone".
    expect(conclude(2, [refused])).toEqual({ settled: false, missing: 1 })
  })
})

describe("the promises a replica gives when it does not reach Redis either", () => {
  it("names only the leases asked about, and every lease for a question that named none", () => {
    const quiet = new QuietPromises()
    quiet.give(["a", "b"], 5000, 0)
    expect([quiet.until("a"), quiet.until("b"), quiet.until("c")]).toEqual([5000, 5000, 0])
    quiet.give(undefined, 7000, 100)
    expect([quiet.until("a"), quiet.until("c")]).toEqual([7000, 7000])
  })

  it("keeps the longest promise of a lease, and forgets the promises that ended before a question", () => {
    const quiet = new QuietPromises()
    quiet.give(["a"], 5000, 0)
    quiet.give(["a"], 4000, 1000)
    expect(quiet.until("a")).toBe(5000)
    quiet.give(["b"], 9000, 6000)
    expect(quiet.until("a")).toBe(0)
    expect(quiet.named).toBe(1)
  })

  it(`counts a question naming more than ${MAX_NAMED_LEASES} leases as naming all of them: the promises stay bounded`, () => {
    const quiet = new QuietPromises()
    const many = Array.from({ length: MAX_NAMED_LEASES + 1 }, (_, i) => `lease-${i}`)
    quiet.give(many, 5000, 0)
    expect(quiet.named).toBe(0)
    expect([quiet.until("lease-0"), quiet.until("any-other")]).toEqual([5000, 5000])
    // Up to the bound, one by one.
    quiet.give(many.slice(0, MAX_NAMED_LEASES), 8000, 10)
    expect(quiet.named).toBe(MAX_NAMED_LEASES)
    expect([quiet.until("lease-0"), quiet.until("lease-10000"), quiet.until("any-other")]).toEqual([8000, 5000, 5000])
  })

  it("counts promises past the bound in all (questions naming other leases each time) as one for every lease", () => {
    const quiet = new QuietPromises()
    quiet.give(Array.from({ length: MAX_NAMED_LEASES }, (_, i) => `a-${i}`), 5000, 0)
    expect(quiet.named).toBe(MAX_NAMED_LEASES)
    quiet.give(["b-0"], 7000, 10)
    expect(quiet.named).toBe(0)
    expect([quiet.until("a-0"), quiet.until("b-0"), quiet.until("any-other")]).toEqual([7000, 7000, 7000])
  })
})
