/**
 * The order test files start in: the slowest first, so that the forks finish together instead of
 * one running a long file alone at the end. Vitest orders by the durations of the last run on this
 * machine (its cache) when it has them for every file; a fresh clone has none and would order by
 * file size, so the files known to be slowest go first, in the order of `SLOWEST`.
 */
import { relative } from "node:path"
import { BaseSequencer, type TestSpecification } from "vitest/node"

/** The slowest files, slowest first (per-file durations of a fresh clone's full run: .tmp/vitest-results.json). */
export const SLOWEST: ReadonlyArray<string> = [
  "test/faults/store-process.test.ts",
  "test/cluster/replicas.test.ts",
  "test/cluster/outage-vouching.test.ts",
  "test/extras/input-required.test.ts",
  "test/cluster/dead-owner-forward.test.ts",
  "test/faults/fuzz.test.ts",
  "test/http/bad-input.test.ts",
  "test/extras/era-matrix.test.ts",
  "test/package/package.test.ts",
  "test/extras/caps-resources.test.ts",
  "test/cluster/cut-off.test.ts",
  "test/faults/async-calls-restart.test.ts",
  "test/cluster/slow-redis.test.ts",
  "test/extras/tracing.test.ts",
  "test/ui/dashboard.test.ts",
  "test/http/oauth.test.ts",
  "test/architecture/import-rules.test.ts",
  "test/ui/operate.test.ts",
  "test/extras/security.test.ts",
  "test/cluster/handover-forward.test.ts",
  "test/cluster/redis-hang.test.ts",
  "test/cluster/approvals-replicas.test.ts",
  "test/extras/mcp-calls.test.ts",
  "test/faults/hostile-upstream.test.ts",
  "test/extras/mcp-sse.test.ts",
  "test/config/client-formats.test.ts",
  "test/http/protocol-eras.test.ts",
  "test/cluster/monitoring-replicas.test.ts",
  "test/conformance/server-scenarios.test.ts",
  "test/http/store-endpoints.test.ts"
]

export default class SlowestFirst extends BaseSequencer {
  override async sort(files: Array<TestSpecification>): Promise<Array<TestSpecification>> {
    const sorted = await super.sort(files)
    const root = this.ctx.config.root
    const path = (file: TestSpecification) => relative(root, file.moduleId)
    const known = sorted.every((file) => this.ctx.cache.getFileTestResults(`${file.project.name}:${path(file)}`) !== undefined)
    if (known) return sorted
    const rank = (file: TestSpecification) => {
      const index = SLOWEST.indexOf(path(file).split("\\").join("/"))
      return index === -1 ? SLOWEST.length : index
    }
    return [...sorted].sort((a, b) => rank(a) - rank(b))
  }
}
