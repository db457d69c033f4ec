/**
 * A short mutual exclusion across replicas (docs/replicas-data.md): `SET <key> <token> NX PX <ttl>`
 * to take it, a compare-and-delete Lua script to give it back, so a holder whose lock expired
 * never releases its successor's. Used for single-flight OAuth refreshes (LiteLLM's design): the
 * TTL bounds how long a replica that died holding it blocks the others.
 */
import { randomUUID } from "node:crypto"
import type { Redis } from "./connection.js"

/** KEYS: keys. ARGV: the holder's token. Deletes each key this holder holds; returns how many. */
export const RELEASE = `
local n = 0
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('DEL', key)
    n = n + 1
  end
end
return n
`

/** The lock was not free within the wait. */
export class LockBusy extends Error {
  override readonly name = "LockBusy"
}

export interface LockOptions {
  /** How long a holder keeps it at most (ms). */
  readonly ttlMs: number
  /** How long to wait for it before giving up (ms). */
  readonly waitMs: number
  /**
   * A wake-up when it is worth trying again (the holder probably finished), cancelled when the
   * wait ends otherwise; the lock is tried again at the latest after `retryMs` anyway.
   */
  readonly wake?: (() => { readonly changed: Promise<void>; readonly cancel: () => void }) | undefined
  readonly retryMs?: number | undefined
}

/** Runs `task` while holding the lock `key`; throws `LockBusy` when it is not free within `waitMs`. */
export const withLock = async <A>(client: Redis, key: string, options: LockOptions, task: () => Promise<A>): Promise<A> => {
  const token = randomUUID()
  const deadline = Date.now() + options.waitMs
  for (;;) {
    const taken = await client.set(key, token, { condition: "NX", expiration: { type: "PX", value: options.ttlMs } })
    if (taken === "OK") break
    const left = deadline - Date.now()
    if (left <= 0) throw new LockBusy(`the lock ${key} stayed taken for ${options.waitMs} ms`)
    let timer: NodeJS.Timeout | undefined
    const wake = options.wake?.()
    await Promise.race([
      ...(wake === undefined ? [] : [wake.changed]),
      new Promise<void>((resolve) => (timer = setTimeout(resolve, Math.min(left, options.retryMs ?? 100))))
    ])
    clearTimeout(timer)
    wake?.cancel()
  }
  try {
    return await task()
  } finally {
    await client.eval(RELEASE, { keys: [key], arguments: [token] }).catch(() => undefined)
  }
}
