// A native driver for cases.cpp, to run the emulation itself under ASan/UBSan or TSan
// (the emulation is multi-threaded C++; Python cannot host the sanitizer runtimes easily).
// Prints one line per mode: "mode <m> rc <status> <message>".
#include <cstdint>
#include <cstdio>
#include <vector>

extern "C" int opgen_emu_launch_emu_case(uint32_t, void* const*, const uint64_t*, uint32_t);
extern "C" const char* opgen_emu_last_error(void);

int main() {
    const uint32_t n = 256;
    // (mode, cores): passing and failing cases across copies, vectors, queues, cores and sync.
    const int modes[][2] = {{99, 1}, {11, 4}, {12, 4}, {13, 4}, {14, 4}, {16, 4}, {19, 1}, {20, 1},
                            {22, 1}, {23, 1}, {26, 4}, {27, 1}, {37, 1}, {38, 1}, {40, 1}, {41, 4},
                            {42, 4}, {44, 1}, {10, 1}, {29, 1}, {28, 2}};
    for (const auto& m : modes) {
        std::vector<float> in(n), out(12 * n), ws(n);
        for (uint32_t i = 0; i < n; ++i) in[i] = static_cast<float>(i % 97) - 40.0f;
        int32_t tiling[2] = {m[0], static_cast<int32_t>(n)};
        void* args[4] = {in.data(), out.data(), ws.data(), tiling};
        const uint64_t sizes[4] = {n * 4, 12 * n * 4, n * 4, sizeof(tiling)};
        int rc = opgen_emu_launch_emu_case(static_cast<uint32_t>(m[1]), args, sizes, 4);
        std::printf("mode %d rc %d %s\n", m[0], rc, opgen_emu_last_error());
    }
    return 0;
}
