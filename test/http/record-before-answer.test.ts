/**
 * A call's record is on disk before its answer leaves: a client that has seen an answer can find
 * the call in its records file (mcp.records.jsonl) at once (and would after a crash right after the answer). Checked
 * through the direct call route and through the HttpApi router (a call with an Origin, even the
 * store's own, is left to the router).
 */
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { fixtureService, startTestServer, type TestServer } from "../support/index.js"

/** The records file of the services file mcp.json (recordsFileFor). */
const RECORDS_FILE = "mcp.records.jsonl"

let server: TestServer
beforeAll(async () => {
  server = await startTestServer({ services: { mcpServers: {} } })
  expect((await server.post("/for_store/add_service", fixtureService("fx"))).status).toBe(200)
  const ready = await server.post("/for_store/wait_service", { client_id_or_service_name: "fx", status: "healthy", timeout: 20 })
  expect(ready.body.data.result).toBe(true)
}, 30_000)
afterAll(() => server.cleanup())

describe("the record of a call", () => {
  it("is in the records file when the answer arrives, call after call", async () => {
    const file = join(server.dir, RECORDS_FILE)
    // Each write of the records file is held back 100 ms: an answer that did not wait for its
    // record would arrive before the record is on disk.
    const records = server.running.store.records as unknown as { flush: () => Promise<void> }
    const flush = records.flush.bind(records)
    records.flush = () => new Promise<void>((resolve) => setTimeout(resolve, 100)).then(flush)
    for (let i = 0; i < 5; i++) {
      const reply = await server.post("/for_store/call_tool", { tool_name: "fx__echo", args: { text: `n${i}` } })
      expect(reply.status, reply.text).toBe(200)
      expect(readFileSync(file, "utf8")).toContain(reply.body.trace_id)
      const routed = await server.request("POST", "/for_store/call_tool", {
        body: JSON.stringify({ tool_name: "fx__echo", args: { text: `r${i}` } }),
        headers: { "content-type": "application/json", origin: server.url }
      })
      expect(routed.status, routed.text).toBe(200)
      expect(readFileSync(file, "utf8")).toContain(routed.body.trace_id)
    }
  })
})
