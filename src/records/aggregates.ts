/**
 * The aggregates of tool-call records (counts, errors and durations by scope, service, tool and
 * UTC day) that summaries, daily figures and query totals are answered from without reading any
 * record. One class for both backends: the records file (src/records/tool-records.ts) counts each record
 * it keeps; the Redis stream (src/records/redis-records.ts) rebuilds the same aggregates from its counts
 * hash, group by group, so the two answer alike.
 */
import { dict } from "../domain/dict.js"

/** Count, errors and total duration of a group of calls. */
export interface Tally {
  count: number
  errors: number
  durationMs: number
}

/** A record as the aggregates see it. */
export interface Counted {
  /** `store`, or the agent id. */
  readonly scope: string
  readonly service_name: string
  readonly tool_name: string
  /** UTC day, `YYYY-MM-DD`. */
  readonly day: string
  readonly failed: boolean
  readonly duration_ms: number
}

const DAY_MS = 86_400_000
const empty = (): Tally => ({ count: 0, errors: 0, durationMs: 0 })

/** Aggregates of one scope. */
class ScopeTallies {
  readonly all: Tally = empty()
  readonly byTool = new Map<string, Tally>()
  readonly byService = new Map<string, Tally>()
}

const merge = (map: Map<string, Tally>, key: string, t: Tally) => {
  const m = map.get(key)
  if (m) {
    m.count += t.count
    m.errors += t.errors
    m.durationMs += t.durationMs
  } else map.set(key, { ...t })
}
/** Merges a negative tally (calls taken off); a group left with no call is removed. */
const drop = (map: Map<string, Tally>, key: string, t: Tally) => {
  const m = map.get(key)
  if (m === undefined) return
  mergeInto(m, t)
  if (m.count <= 0) map.delete(key)
}
const mergeInto = (m: Tally, t: Tally) => {
  m.count += t.count
  m.errors += t.errors
  m.durationMs += t.durationMs
}

export const tallyView = (t: Tally) => ({
  count: t.count,
  errors: t.errors,
  avg_duration_ms: t.count === 0 ? 0 : Math.round((t.durationMs / t.count) * 100) / 100
})

export class RecordTallies {
  private readonly scopes = new Map<string, ScopeTallies>()
  /** Calls per UTC day (YYYY-MM-DD), every scope. */
  private readonly byDay = new Map<string, Tally>()
  /** Calls per UTC day of each scope and service (`<scope>\u0000<service>`): the narrowed `daily`. */
  private readonly byDayOf = new Map<string, Map<string, Tally>>()

  /** Counts one record. */
  count(r: Counted): void {
    const t: Tally = { count: 1, errors: r.failed ? 1 : 0, durationMs: r.duration_ms }
    this.addTool(r.scope, r.service_name, r.tool_name, t)
    this.addDay(r.day, r.scope, r.service_name, t)
  }

  /** Takes one counted record off again (the records file dropped it): a group left with no call is gone. */
  uncount(r: Counted): void {
    const t: Tally = { count: -1, errors: r.failed ? -1 : 0, durationMs: -r.duration_ms }
    const s = this.scopes.get(r.scope)
    if (s !== undefined) {
      mergeInto(s.all, t)
      drop(s.byTool, `${r.service_name}\u0000${r.tool_name}`, t)
      drop(s.byService, r.service_name, t)
      if (s.all.count <= 0) this.scopes.delete(r.scope)
    }
    drop(this.byDay, r.day, t)
    const of = `${r.scope}\u0000${r.service_name}`
    const days = this.byDayOf.get(of)
    if (days !== undefined) {
      drop(days, r.day, t)
      if (days.size === 0) this.byDayOf.delete(of)
    }
  }

  /** Adds a group of calls of one tool (scope, service and tool figures). */
  addTool(scope: string, service: string, tool: string, t: Tally): void {
    let s = this.scopes.get(scope)
    if (!s) this.scopes.set(scope, (s = new ScopeTallies()))
    mergeInto(s.all, t)
    merge(s.byTool, `${service}\u0000${tool}`, t)
    merge(s.byService, service, t)
  }

  /** Adds a group of calls of one day of one scope's service (daily figures). */
  addDay(day: string, scope: string, service: string, t: Tally): void {
    merge(this.byDay, day, t)
    const of = `${scope}\u0000${service}`
    let days = this.byDayOf.get(of)
    if (!days) this.byDayOf.set(of, (days = new Map()))
    merge(days, day, t)
  }

  /** How many records are counted. */
  total(): number {
    let n = 0
    for (const t of this.scopes.values()) n += t.all.count
    return n
  }

  /** How many records match a scope / service / tool filter. */
  countMatching(q: { readonly scope?: string | undefined; readonly service_name?: string | undefined; readonly tool_name?: string | undefined }): number {
    let n = 0
    for (const [key, t] of this.scopes) {
      if (q.scope !== undefined && key !== q.scope) continue
      if (q.tool_name !== undefined) {
        for (const [k, v] of t.byTool) {
          const [service, tool] = k.split("\u0000")
          if (tool === q.tool_name && (q.service_name === undefined || service === q.service_name)) n += v.count
        }
      } else if (q.service_name !== undefined) n += t.byService.get(q.service_name)?.count ?? 0
      else n += t.all.count
    }
    return n
  }

  /** Totals over every record of the given scopes (all scopes when undefined). */
  summary(scopes?: ReadonlyArray<string>) {
    const all = empty()
    const byTool = new Map<string, Tally>()
    const byService = new Map<string, Tally>()
    for (const [key, t] of this.scopes) {
      if (scopes !== undefined && !scopes.includes(key)) continue
      mergeInto(all, t.all)
      for (const [k, v] of t.byTool) merge(byTool, k.replace("\u0000", "__"), v)
      for (const [k, v] of t.byService) merge(byService, k, v)
    }
    return {
      total_executions: all.count,
      succeeded: all.count - all.errors,
      failed: all.errors,
      avg_duration_ms: tallyView(all).avg_duration_ms,
      by_tool: dict([...byTool].map(([k, v]) => [k, tallyView(v)])),
      by_service: dict([...byService].map(([k, v]) => [k, tallyView(v)]))
    }
  }

  /**
   * Calls per UTC day for the `days` days ending today, oldest first, a row for every day; only
   * those of scope `agent_id` ("store" or an agent id) and service `service_name` when given.
   */
  daily(days: number, now = Date.now(), narrowing: { readonly agent_id?: string | undefined; readonly service_name?: string | undefined } = {}) {
    const narrowed = narrowing.agent_id !== undefined || narrowing.service_name !== undefined
    const sources: Array<Map<string, Tally>> = []
    if (narrowed) {
      for (const [key, daysOf] of this.byDayOf) {
        const [scope, service] = key.split("\u0000") as [string, string]
        if ((narrowing.agent_id === undefined || narrowing.agent_id === scope) && (narrowing.service_name === undefined || narrowing.service_name === service)) sources.push(daysOf)
      }
    }
    const rows = []
    for (let i = days - 1; i >= 0; i--) {
      const date = new Date(now - i * DAY_MS).toISOString().slice(0, 10)
      let t = this.byDay.get(date) ?? empty()
      if (narrowed) {
        t = empty()
        for (const daysOf of sources) {
          const d = daysOf.get(date)
          if (d !== undefined) mergeInto(t, d)
        }
      }
      rows.push({ date, calls: t.count, errors: t.errors, avg_duration_ms: tallyView(t).avg_duration_ms })
    }
    return rows
  }
}
