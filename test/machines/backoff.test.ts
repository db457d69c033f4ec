/**
 * `backoffMs` (src/machines/service.ts), a pure function: the reconnection delay of docs/lifecycle.md
 * (1 s, 2 s, 4 s ... at most `reconnection_seconds`, each with ±10 % jitter). `attempt` counts the
 * failed attempts so far (0 for the first attempt).
 */
import { describe, expect, it } from "vitest"
import { defaultMonitoring } from "../../src/domain/settings.js"
import { backoffMs } from "../../src/machines/service.js"

const settings = defaultMonitoring()
const fixed = (r: number) => () => r

describe("backoffMs", () => {
  it("doubles from 1 s without jitter at random 0.5", () => {
    expect([0, 1, 2, 3, 4, 5].map((a) => backoffMs(a, settings, fixed(0.5)))).toEqual([1000, 2000, 4000, 8000, 16000, 32000])
  })

  it("is capped at reconnection_seconds", () => {
    expect(backoffMs(6, settings, fixed(0.5))).toBe(60_000)
    expect(backoffMs(7, settings, fixed(0.5))).toBe(60_000)
    expect(backoffMs(3, defaultMonitoring({ reconnection_seconds: 5 }), fixed(0.5))).toBe(5000)
    expect(backoffMs(0, defaultMonitoring({ reconnection_seconds: 0.5 }), fixed(0.5))).toBe(500)
  })

  it("jitter is -10 % at random 0 and +10 % at random 1", () => {
    expect([0, 1, 2, 3].map((a) => backoffMs(a, settings, fixed(0)))).toEqual([900, 1800, 3600, 7200])
    expect([0, 1, 2, 3].map((a) => backoffMs(a, settings, fixed(1)))).toEqual([1100, 2200, 4400, 8800])
  })

  it("the cap holds after jitter: never above reconnection_seconds", () => {
    const s = defaultMonitoring({ reconnection_seconds: 35 })
    expect(backoffMs(5, s, fixed(1))).toBe(35_000) // 35.2 s jittered, capped
    expect(backoffMs(5, s, fixed(0))).toBe(28_800)
  })

  it("stays within ±10 % for any random value, and grows with the attempt", () => {
    for (let attempt = 0; attempt < 6; attempt++) {
      const base = 1000 * 2 ** attempt
      for (let i = 0; i <= 20; i++) {
        const d = backoffMs(attempt, settings, fixed(i / 20))
        expect(d).toBeGreaterThanOrEqual(base * 0.9 - 1e-9)
        expect(d).toBeLessThanOrEqual(Math.min(base * 1.1, 60_000) + 1e-9)
      }
      expect(backoffMs(attempt + 1, settings, fixed(0.5))).toBeGreaterThan(backoffMs(attempt, settings, fixed(0.5)))
    }
  })

  it("huge attempt counts neither overflow nor exceed the cap", () => {
    expect(backoffMs(1000, settings, fixed(0.5))).toBe(60_000)
    expect(backoffMs(Number.MAX_SAFE_INTEGER, settings, fixed(0))).toBe(60_000)
  })

  it("draws one random number per call", () => {
    let calls = 0
    backoffMs(2, settings, () => {
      calls++
      return 0.3
    })
    expect(calls).toBe(1)
  })
})
