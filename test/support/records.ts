// Tool-call records for the records tests: one factory, so every test builds them alike.
import type { NewRecord } from "../../src/records/tool-records.js"

let seq = 0

/** A record as `ToolRecords.record` takes it, with params, result and trace id distinct per call. */
export const newRecord = (over: Partial<NewRecord> = {}): NewRecord => {
  const n = seq++
  return {
    scope: "store",
    agent_id: null,
    service_name: "svc",
    tool_name: "echo",
    params: { n },
    result: `result ${n}`,
    outcome: "success",
    error: null,
    duration_ms: 10,
    trace_id: `t-${n}`,
    ...over
  }
}
