/**
 * A store whose agent has one `per_user` service (README, Per-user credentials), the set-up the
 * per-user tests share: a keys file with an admin key and agent keys, the service's `Authorization`
 * header each principal's own, given by the principals named.
 */
import { join } from "node:path"
import { addService, authedApi, giveCredential, type Api } from "./client.js"
import { createKey, freshDir, startTestServer, type TestServer, type TestServerOptions } from "./server.js"

export interface PerUserStore {
  readonly server: TestServer
  /** Each key's secret by name (`admin` too). */
  readonly keys: Readonly<Record<string, string>>
  /** A JSON client with the named key. */
  readonly as: (name: string) => Api
}

/**
 * Starts a store with keys: `admin`, and an agent key of `agent` for each name of `principals` and
 * `without`; adds the agent's service `service` at `url` with `per_user: {headers: ["Authorization"]}`;
 * each of `principals` gives its own `Bearer <name>-own`, those `without` give nothing.
 */
export const startPerUserStore = async (setup: {
  readonly url: string
  readonly agent: string
  readonly service: string
  readonly principals: ReadonlyArray<string>
  readonly without?: ReadonlyArray<string>
  readonly options?: TestServerOptions["options"]
}): Promise<PerUserStore> => {
  const dir = freshDir()
  const keysFile = join(dir, "mcp-store.keys.json")
  const keys: Record<string, string> = { admin: await createKey(keysFile, "--role", "admin", "--name", "ops") }
  for (const name of [...setup.principals, ...(setup.without ?? [])]) keys[name] = await createKey(keysFile, "--role", "agent", "--agent", setup.agent, "--name", name)
  const server = await startTestServer({ dir, ...(setup.options !== undefined ? { options: setup.options } : {}) })
  const as = (name: string) => authedApi(server.url, keys[name]!)
  const prefix = `/for_agent/${setup.agent}`
  await addService(as("admin"), prefix, { name: setup.service, url: setup.url, per_user: { headers: ["Authorization"] } })
  for (const name of setup.principals) await giveCredential(as(name), prefix, setup.service, { headers: { Authorization: `Bearer ${name}-own` } })
  return { server, keys, as }
}
