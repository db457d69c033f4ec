/**
 * Asynchronous calls outlive their store process (src/records/async-results.ts): a store process
 * killed with SIGKILL and started again on the same services file still answers a finished call's
 * answer, and marks a call that was running `interrupted`, with one record of that outcome; a store
 * stopped with SIGTERM keeps its running call the same way. A call whose upstream answered with a
 * task is not lost: after SIGKILL or SIGTERM the next store follows the task again under the same
 * call id, to its end and one record. Real store processes, a real stdio fixture and the era HTTP
 * fixture (2026-07-28, task tools), which outlives the stores; one run of three stores for all of it.
 */
import { afterAll, describe, expect, it } from "vitest"
import { readFileSync, rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { stdioFixture } from "../fixtures/paths.js"
import { startEraHttpFixture } from "../fixtures/era-http.js"
import { eventually, freshDir, spawnStore, type Api, type Reply, type StoreProcess } from "../support/index.js"

const launch = stdioFixture()

const ready = async (store: Api): Promise<void> => {
  const waited = await store.post("/for_store/wait_service", { client_id_or_service_name: "fx", status: "healthy", timeout: 30 })
  expect(waited.status, waited.text).toBe(200)
}

const startAsync = async (store: Api, body: Record<string, unknown>): Promise<string> => {
  const reply = await store.post("/for_store/call_tool", { ...body, async: true })
  expect(reply.status, reply.text).toBe(202)
  return reply.body.call_id as string
}

const settled = async (store: Api, callId: string): Promise<Reply> => {
  let last: Reply | undefined
  expect(
    await eventually(async () => {
      last = await store.get(`/for_store/calls/${callId}`)
      return last.status === 200 && last.body.status !== "running"
    }, 20_000, 100)
  ).toBe(true)
  return last!
}

describe("asynchronous calls across a restart of the store", () => {
  const dir = freshDir()
  const configFile = join(dir, "mcp.json")
  const processes: StoreProcess[] = []
  let stopFixture: (() => Promise<void>) | undefined
  /** A call as the store's file of asynchronous calls holds it now. */
  const onDisk = (callId: string): { service_name?: string } | undefined => {
    try {
      const doc = JSON.parse(readFileSync(join(dir, "mcp.async-calls.json"), "utf8")) as { calls: Array<{ call_id: string; service_name?: string }> }
      return doc.calls.find((c) => c.call_id === callId)
    } catch {
      return undefined
    }
  }
  /** The upstream task a call follows, as the file holds it. */
  const upstreamTask = (callId: string): string | undefined => (onDisk(callId) as { upstream_task?: string } | undefined)?.upstream_task
  const spawn = async () => {
    const store = await spawnStore({ configFile, startTimeoutMs: 60_000 })
    processes.push(store)
    await ready(store)
    const waited = await store.post("/for_store/wait_service", { client_id_or_service_name: "mod", status: "healthy", timeout: 30 })
    expect(waited.status, waited.text).toBe(200)
    return store
  }
  afterAll(async () => {
    for (const p of processes) await p.kill()
    await stopFixture?.()
    rmSync(dir, { recursive: true, force: true })
  }, 20_000)

  it("after SIGKILL: a finished answer is still read; a running call is interrupted and recorded once; after SIGTERM too; a call following an upstream task is followed again and completes", async () => {
    // `mod`: the era HTTP fixture (2026-07-28, task tools), which outlives the stores.
    const http = await startEraHttpFixture()
    stopFixture = () => http.stop()
    writeFileSync(configFile, JSON.stringify({ mcpServers: { fx: { command: launch.command, args: [...launch.args] }, mod: { url: http.url } } }))
    const first = await spawn()
    // A task of 40 steps of 200 ms: it outlives the first two stores. Followed with a tasks/get every
    // 200 ms (the rate does not matter here, only that it is followed again after each restart).
    const job = await startAsync(first, { tool_name: "mod__job", args: { steps: 40, step_ms: 200, poll_ms: 200 }, timeout: 120 })
    const done = await startAsync(first, { tool_name: "fx__add", args: { a: 20, b: 22 } })
    const finished = await settled(first, done)
    expect(finished.body.status).toBe("completed")
    const running = await startAsync(first, { tool_name: "fx__sleep", args: { ms: 120_000 } })
    expect((await first.get(`/for_store/calls/${running}`)).body.status).toBe("running")
    // The call reached its service, and its file says so, before the store is killed.
    expect(await eventually(() => onDisk(running)?.service_name === "fx", 10_000)).toBe(true)
    expect(await eventually(() => upstreamTask(job) !== undefined, 10_000), JSON.stringify([onDisk(job), (await first.get(`/for_store/calls/${job}`)).body])).toBe(true)
    const task = upstreamTask(job)
    await first.kill()

    const second = await spawn()
    // The task's call is followed again: running, the same upstream task.
    expect(await eventually(async () => (await second.get(`/for_store/calls/${job}`)).body.status === "running", 10_000)).toBe(true)
    expect(upstreamTask(job)).toBe(task)
    const after = await second.get(`/for_store/calls/${done}`)
    expect(after.status, after.text).toBe(200)
    expect(after.body).toMatchObject({ status: "completed", answer: { http_status: 200, body: { result: "42", success: true } } })
    const lost = await second.get(`/for_store/calls/${running}`)
    expect(lost.status, lost.text).toBe(200)
    expect(lost.body).toMatchObject({ status: "interrupted", answer: null, service_name: "fx" })
    expect(lost.body.error).toContain("stopped")
    const interrupted = async (store: Api) => (await store.get("/for_store/tool_records?outcome=interrupted")).body.executions as Array<{ tool_name: string; service_name: string; params: unknown }>
    expect(await eventually(async () => (await interrupted(second)).length === 1, 10_000)).toBe(true)
    expect((await interrupted(second))[0]).toMatchObject({ service_name: "fx", tool_name: "sleep", params: { ms: 120_000 } })

    // A stop (SIGTERM) while a call runs: the same, and the record says interrupted, not cancelled.
    const stopped = await startAsync(second, { tool_name: "fx__sleep", args: { ms: 120_000 } })
    expect(await eventually(() => onDisk(stopped)?.service_name === "fx", 10_000)).toBe(true)
    second.child.kill("SIGTERM")
    await second.exited

    const third = await spawn()
    expect((await third.get(`/for_store/calls/${stopped}`)).body.status).toBe("interrupted")
    expect((await third.get(`/for_store/calls/${running}`)).body.status).toBe("interrupted")
    expect((await third.get(`/for_store/calls/${done}`)).body.status).toBe("completed")
    expect(await eventually(async () => (await interrupted(third)).length === 2, 10_000)).toBe(true)
    const cancelled = (await third.get("/for_store/tool_records?outcome=cancelled")).body.executions as unknown[]
    expect(cancelled).toHaveLength(0)

    // The task's call, through a kill and a stop: completed, recorded once, its task never cancelled upstream.
    const followed = await settled(third, job)
    expect(followed.body, followed.text).toMatchObject({ status: "completed", answer: { http_status: 200, body: { success: true, structured_content: { steps: 40 } } } })
    const records = (await third.get("/for_store/tool_records?tool_name=job")).body.executions as Array<{ outcome: string }>
    expect(records.map((r) => r.outcome)).toEqual(["success"])
    expect(http.requests()).not.toContain("POST tasks/cancel")
  }, 150_000)
})
