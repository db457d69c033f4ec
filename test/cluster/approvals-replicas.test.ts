/**
 * Approvals across replicas (src/cluster/shared-approvals.ts, src/runtime/approvals.ts): two real
 * store processes on one real Redis, the stdio fixture as the upstream. A call waiting for its
 * approval on replica A is listed on B (and B's /events announces it), approved through B (A's call
 * completes, its record naming the approver), denied through B, a decision with another digest
 * through B is 400 and decides nothing, and B's list empties once decided. Redis frozen: a decision
 * through B is 503 cluster_unavailable, B's list still answers, and reading the approval through B
 * is 503 too. A frozen: a decision through B is 503 (not known to be applied or not); read again
 * once A runs, the call is decided once. A killed with a call waiting: a decision through B is 404 and B's list
 * drops the approval.
 */
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  eventually,
  fixtureService,
  freshDir,
  hasRedisServer,
  openSse,
  spawnStore,
  startRedisServer,
  useReplicaSecret,
  type Reply,
  type RedisServer,
  type SseStream,
  type StoreProcess
} from "../support/index.js"

const LEASE_MS = 2000

interface Pending {
  readonly approval_id: string
  readonly arguments: Record<string, unknown>
  readonly arguments_digest: string
}

describe.skipIf(!hasRedisServer)("approvals across replicas", { timeout: 60_000 }, () => {
  let redis: RedisServer
  let a: StoreProcess
  let b: StoreProcess
  let events: SseStream | undefined
  let restoreSecret: (() => void) | undefined

  /** The approval of the call with `args`, as `replica` lists it (waited for: the call is on its way). */
  const listedOn = async (replica: StoreProcess, args: Record<string, unknown>): Promise<Pending> => {
    let found: Pending | undefined
    const seen = await eventually(async () => {
      const list = await replica.get("/for_store/approvals")
      found = (list.body.approvals as Pending[] | undefined)?.find((p) => JSON.stringify(p.arguments) === JSON.stringify(args))
      return found !== undefined
    }, 10_000, 25)
    expect(seen, `an approval of ${JSON.stringify(args)} is listed`).toBe(true)
    return found!
  }
  const listedIds = async (replica: StoreProcess): Promise<string[]> => ((await replica.get("/for_store/approvals")).body.approvals as Pending[]).map((p) => p.approval_id)

  beforeAll(async () => {
    restoreSecret = useReplicaSecret()
    redis = await startRedisServer()
    const started = await Promise.all(
      [0, 1].map(() => {
        const dir = freshDir()
        writeFileSync(join(dir, "mcp.json"), JSON.stringify({ mcpServers: {} }))
        return spawnStore({
          configFile: join(dir, "mcp.json"),
          extraArgs: ["--redis-url", redis.url, "--cluster-name", "approvals", "--lease-ms", String(LEASE_MS), "--approval-timeout", "30"],
          startTimeoutMs: 50_000
        })
      })
    )
    ;[a, b] = started as [StoreProcess, StoreProcess]
    const added = await a.post("/for_store/add_service?wait=30", { ...fixtureService("fx"), require_approval: ["echo", "add"] })
    expect(added.status, added.text).toBe(200)
    for (const r of [a, b]) {
      const ready = await r.post("/for_store/wait_service", { client_id_or_service_name: "fx", status: "healthy", timeout: 30 })
      expect(ready.status, ready.text).toBe(200)
    }
    events = await openSse(`${b.url}/events`)
  }, 60_000)
  afterAll(async () => {
    events?.close()
    await Promise.all([a, b].map((r) => r?.kill()))
    await redis?.stop({ kill: true })
    restoreSecret?.()
  }, 30_000)

  it("a call waiting on A is listed on B and its /events, approved through B (the record names the approver), and B's list empties", async () => {
    const args = { text: "approve me through b" }
    const call = a.post("/for_store/call_tool", { tool_name: "fx__echo", args })
    const pending = await listedOn(b, args)
    await events!.waitFor((e) => e.event === "approval" && e.json?.approval_id === pending.approval_id && e.json.status === "pending", 5_000, "pending event on B")
    const one = await b.get(`/for_store/approvals/${pending.approval_id}`)
    expect(one.status, one.text).toBe(200)
    expect(one.body.approval).toMatchObject({ approval_id: pending.approval_id, tool_name: "fx__echo", arguments: args })

    const decided = await b.post(`/for_store/approvals/${pending.approval_id}`, { decision: "approve", arguments_digest: pending.arguments_digest })
    expect(decided.status, decided.text).toBe(200)
    expect(decided.body).toMatchObject({ decision: "approved", approval: { approval_id: pending.approval_id } })
    const by = decided.body.decided_by as string
    expect(by.length).toBeGreaterThan(0)

    const answer = await call
    expect(answer.status, answer.text).toBe(200)
    expect(JSON.stringify(answer.body)).toContain("approve me through b")
    await events!.waitFor((e) => e.event === "approval" && e.json?.approval_id === pending.approval_id && e.json.status === "approved" && e.json.decided_by === by, 5_000, "approved event on B")
    let record: Record<string, any> | undefined
    expect(
      await eventually(async () => {
        const records = await b.get("/for_store/tool_records?limit=100")
        record = (records.body.executions as Array<Record<string, any>>).find((r) => r.trace_id === answer.body.trace_id)
        return record !== undefined
      }, 5_000, 25)
    ).toBe(true)
    expect(record).toMatchObject({ outcome: "success", approval: { approval_id: pending.approval_id, decided_by: by } })
    expect(await eventually(async () => !(await listedIds(b)).includes(pending.approval_id), 5_000, 25)).toBe(true)
    expect(await listedIds(a)).not.toContain(pending.approval_id)
    expect((await b.get(`/for_store/approvals/${pending.approval_id}`)).status).toBe(404)
    // Decided once: a second decision through either replica finds nothing.
    expect((await b.post(`/for_store/approvals/${pending.approval_id}`, { decision: "deny" })).status).toBe(404)
  })

  it("a decision with another digest through B is 400 and decides nothing; a deny through B ends A's call APPROVAL_DENIED", async () => {
    const args = { a: 20, b: 22 }
    const call = a.post("/for_store/call_tool", { tool_name: "fx__add", args })
    const pending = await listedOn(b, args)
    const wrong = await b.post(`/for_store/approvals/${pending.approval_id}`, { decision: "approve", arguments_digest: "0".repeat(64) })
    expect(wrong.status, wrong.text).toBe(400)
    expect(wrong.text).toContain("arguments_digest")
    expect(await listedIds(b)).toContain(pending.approval_id)
    expect(await listedIds(a)).toContain(pending.approval_id)

    const denied = await b.post(`/for_store/approvals/${pending.approval_id}`, { decision: "deny" })
    expect(denied.status, denied.text).toBe(200)
    expect(denied.body.decision).toBe("denied")
    const answer: Reply = await call
    expect(answer.status, answer.text).toBe(403)
    expect(answer.body.error).toMatchObject({ code: "APPROVAL_DENIED", details: { approval_id: pending.approval_id, decided_by: denied.body.decided_by } })
    expect(await eventually(async () => (await listedIds(b)).length === 0, 5_000, 25)).toBe(true)
  })

  it("A frozen: a decision through B is 503 (it may have been applied), not 404; read again, it is decided once", async () => {
    const args = { text: "decided while a sleeps" }
    const call = a.post("/for_store/call_tool", { tool_name: "fx__echo", args })
    const pending = await listedOn(b, args)
    process.kill(a.pid, "SIGSTOP")
    let unknown: Reply
    try {
      unknown = await b.post(`/for_store/approvals/${pending.approval_id}`, { decision: "approve" })
    } finally {
      process.kill(a.pid, "SIGCONT")
    }
    expect(unknown.status, unknown.text).toBe(503)
    expect(unknown.body.error.message).toMatch(/may have been applied/)
    // As the answer says: read it again (once A is back in the registry), and decide again only if it still waits.
    const settled = Promise.race([call.then(() => true), new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 10_000))])
    const stillWaits = await eventually(async () => (await b.get(`/for_store/approvals/${pending.approval_id}`)).status === 200, 10_000, 100)
    if (stillWaits) expect((await b.post(`/for_store/approvals/${pending.approval_id}`, { decision: "approve" })).status).toBe(200)
    else expect(await settled, "the first decision was applied").toBe(true)
    const answer = await call
    expect(answer.status, answer.text).toBe(200)
    expect(JSON.stringify(answer.body)).toContain("decided while a sleeps")
  })

  it("Redis frozen: a decision through B is 503 cluster_unavailable and B's list answers; A killed: a decision through B is 404 and B's list drops it", async () => {
    const args = { text: "held while redis sleeps" }
    const call = a.post("/for_store/call_tool", { tool_name: "fx__echo", args })
    // A is killed below: its call's connection closes unanswered.
    call.catch(() => undefined)
    const pending = await listedOn(b, args)
    redis.freeze()
    try {
      const refused = await b.post(`/for_store/approvals/${pending.approval_id}`, { decision: "approve" })
      expect(refused.status, refused.text).toBe(503)
      expect(refused.body.error).toMatchObject({ code: "SERVICE_UNAVAILABLE", details: { reason: "cluster_unavailable" } })
      const list = await b.get("/for_store/approvals")
      expect(list.status, list.text).toBe(200)
      // Whether A's call waits is not known either: not a 404.
      const looked = await b.get(`/for_store/approvals/${pending.approval_id}`)
      expect(looked.status, looked.text).toBe(503)
      expect(looked.body.error).toMatchObject({ code: "SERVICE_UNAVAILABLE", details: { reason: "cluster_unavailable" } })
    } finally {
      redis.thaw()
    }
    expect(await listedIds(a)).toContain(pending.approval_id)

    await a.kill()
    const gone = await b.post(`/for_store/approvals/${pending.approval_id}`, { decision: "approve" })
    expect(gone.status, gone.text).toBe(404)
    expect(gone.body.error.code).toBe("NOT_FOUND")
    expect(await eventually(async () => !(await listedIds(b)).includes(pending.approval_id), 10_000, 50)).toBe(true)
  })
})
