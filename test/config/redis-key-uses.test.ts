// The keys of a cluster (RedisKeyUses) against a real redis-server: two replicas' key rings read one
// keys file and write last_used to Redis, never to the file; the later use is kept.
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { createClient } from "redis"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { RedisKeyUses } from "../../src/config/redis-key-uses.js"
import { KeyRing, newKey, writeKeys } from "../../src/config/api-keys.js"
import { hasRedisServer, startRedisServer, type RedisServer } from "../support/index.js"

let redis: RedisServer
beforeAll(async () => {
  if (hasRedisServer) redis = await startRedisServer()
})
afterAll(() => redis?.stop())

describe.skipIf(!hasRedisServer)("key uses of a cluster", () => {
  it("go to Redis from every replica, the later kept, and the shared keys file is never written", async () => {
    const dir = mkdtempSync(join(tmpdir(), "mcp-store-keys-"))
    const client = createClient({ url: redis.url })
    client.on("error", () => undefined)
    await client.connect()
    try {
      const path = join(dir, "mcp-store.keys.json")
      const { key, entry } = newKey({ role: "reader" })
      await writeKeys(path, { version: 1, keys: [entry] })
      const before = readFileSync(path, "utf8")
      const uses = new RedisKeyUses({ client, cluster: "keys" })
      const problems: string[] = []
      const rings = [new KeyRing(path, [], (m) => problems.push(m)), new KeyRing(path, [], (m) => problems.push(m))]
      for (const ring of rings) {
        ring.loadSync()
        ring.writeUsesTo(uses.write)
      }
      const early = Date.parse("2026-01-01T00:00:00Z")
      expect(rings[1]!.check(`Bearer ${key}`, early + 60_000)).toMatchObject({ ok: true, principal: { role: "reader" } })
      expect(rings[0]!.check(`Bearer ${key}`, early)).toMatchObject({ ok: true })
      // close() writes the pending uses: the later one stays, whichever replica wrote last.
      await rings[1]!.close()
      await rings[0]!.close()
      expect(await uses.all()).toEqual({ [entry.id]: new Date(early + 60_000).toISOString() })
      expect(readFileSync(path, "utf8")).toBe(before)
      expect(problems).toEqual([])
    } finally {
      client.destroy()
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
