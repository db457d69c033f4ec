// "Did you mean" (src/domain/suggest.ts): the distance (a swap of neighbours counts once), the
// suggestions (nearest first, within 2, at most 3, never the name itself) and its bounds against a
// hostile list: 10,000 look-alike names, names of a megabyte, a name looked for that is too long.
import { describe, expect, it } from "vitest"
import { distance, MAX_CANDIDATES, MAX_DISTANCE, MAX_SUGGESTIONS, suggestions } from "../../src/domain/suggest.js"

describe("distance", () => {
  it.each([
    ["demo__add", "demo__add", 0],
    ["demo__addd", "demo__add", 1],
    ["dmeo__add", "demo__add", 1],
    ["demo_add", "demo__add", 1],
    ["weather", "whether", 2],
    ["", "ab", 2]
  ])("%s / %s: %i", (a, b, d) => {
    expect(distance(a, b)).toBe(d)
    expect(distance(b, a)).toBe(d)
  })

  it("stops at the limit: anything farther is limit + 1", () => {
    expect(distance("abcdef", "uvwxyz")).toBe(MAX_DISTANCE + 1)
    expect(distance("a", "abcdefgh")).toBe(MAX_DISTANCE + 1)
    expect(distance("abcdef", "uvwxyz", 10)).toBe(6)
  })
})

describe("suggestions", () => {
  it("nearest first, then by name; within the distance; never the name itself", () => {
    expect(suggestions("demo__addd", ["demo__add", "demo__echo", "fx__add", "demo__addd", "demo__ad"])).toEqual(["demo__add", "demo__ad"])
    expect(suggestions("Demo__Add", ["demo__add"])).toEqual(["demo__add"])
    expect(suggestions("zzz", ["demo__add"])).toEqual([])
    expect(suggestions("", ["a"])).toEqual([])
  })

  it("gives at most MAX_SUGGESTIONS", () => {
    expect(suggestions("tool", ["tool1", "tool2", "tool3", "tool4", "tool5"])).toHaveLength(MAX_SUGGESTIONS)
  })

  it("is bounded against 10,000 look-alike names and huge ones", () => {
    const lookAlikes = Array.from({ length: 10_000 }, (_, i) => `svc__tool${i % 10}${"x".repeat(i % 3)}`)
    const huge = "a".repeat(1_000_000)
    const started = performance.now()
    for (let i = 0; i < 20; i++) suggestions("svc__tool", [huge, ...lookAlikes])
    expect(suggestions(huge, lookAlikes)).toEqual([])
    expect(suggestions("a".repeat(127), [huge])).toEqual([])
    // 20 look-ups over 10,000 names, each comparing at most MAX_CANDIDATES: well under a second.
    expect(performance.now() - started).toBeLessThan(1000)
    // Only the first MAX_CANDIDATES names are looked at.
    const late = [...Array.from({ length: MAX_CANDIDATES }, (_, i) => `unrelated-${i}`), "svc__tool"]
    expect(suggestions("svc__tol", late)).toEqual([])
  })
})
