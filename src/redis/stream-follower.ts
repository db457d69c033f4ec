/**
 * Follows a Redis Stream of the cluster (records, alerts) with XREAD BLOCK on a connection of its
 * own (a blocked read holds its connection), from a cursor its owner keeps: a reader that was
 * disconnected resumes where it was and misses nothing that is still in the stream, which pub/sub
 * cannot do. A failed read is logged and tried again a second later.
 */
import { log } from "../logging/log.js"
import type { Redis } from "./connection.js"

/** One stream entry as node-redis gives it. */
export interface StreamEntry {
  readonly id: string
  readonly message: Record<string, string>
}

/** Entries read per XREAD. */
const BATCH = 500

export interface StreamFollower {
  /** Stops reading and closes its connection; resolves once the loop has ended. */
  close(): Promise<void>
}

/** Reads `key` after `cursor()` until closed, handing each batch (in order) to `onBatch`. */
export const followStream = async (
  client: Redis,
  key: string,
  cursor: () => string,
  onBatch: (entries: ReadonlyArray<StreamEntry>) => void | Promise<void>,
  name: string
): Promise<StreamFollower> => {
  const reader = client.duplicate()
  reader.on("error", (e: Error) => log.warn(`the ${name} reader's Redis connection failed: ${e.message}`, { event: "cluster_stream_reader_error", stream: name }))
  await reader.connect()
  let closed = false
  let retry: NodeJS.Timeout | undefined
  let wake: (() => void) | undefined
  const loop = async () => {
    while (!closed) {
      let batch: Array<{ messages: StreamEntry[] }> | null
      try {
        batch = (await reader.xRead({ key, id: cursor() }, { BLOCK: 5_000, COUNT: BATCH })) as Array<{ messages: StreamEntry[] }> | null
      } catch (e) {
        if (closed) return
        log.warn(`reading the cluster's ${name} failed: ${e instanceof Error ? e.message : String(e)}; retrying`, { event: "cluster_stream_read_failed", stream: name })
        await new Promise<void>((resolve) => {
          wake = resolve
          retry = setTimeout(resolve, 1_000)
        })
        continue
      }
      if (closed) return
      try {
        await onBatch(batch?.[0]?.messages ?? [])
      } catch (e) {
        log.error(`the cluster's ${name} could not be taken: ${e instanceof Error ? e.message : String(e)}`, { event: "cluster_stream_take_failed", stream: name })
      }
    }
  }
  const running = loop()
  return {
    close: async () => {
      closed = true
      clearTimeout(retry)
      wake?.()
      reader.destroy()
      await running
    }
  }
}
