// opgen's emulation of CANN's op registration (register/op_def_registry.h): OpDef with its
// inputs, outputs, attributes and per-SoC AI Core configs, OP_ADD, and the hooks (TilingFunc,
// InferShape, InferDataType) an op_host project registers. Modelled on CANN's documented
// custom-op API (OpDef, OpParamDef, OpAttrDef, OpAICoreDef, OpAICoreConfig); checked only
// against the documentation, never against a CANN toolkit.
//
// The emulation runs what a project registers: opgen_emu_tiling() builds a gert::TilingContext
// from the shapes, dtypes and platform it is given, calls the op's TilingFunc and returns the
// tiling key, block dim, workspace sizes and tiling data (the ascend-emu runner calls it before
// every launch); opgen_emu_infer() runs InferShape and InferDataType.
#ifndef OPGEN_EMU_HOST_OP_DEF_REGISTRY_H
#define OPGEN_EMU_HOST_OP_DEF_REGISTRY_H

#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/types.h"
#include "log/log.h"

namespace ops {

enum Option { IGNORE = 0, OPTIONAL = 1, REQUIRED = 2, DYNAMIC = 3 };

using TilingFunc = ge::graphStatus (*)(gert::TilingContext*);
using InferShapeFunc = ge::graphStatus (*)(gert::InferShapeContext*);
using InferDataTypeFunc = ge::graphStatus (*)(gert::InferDataTypeContext*);

class OpParamDef {
public:
    explicit OpParamDef(const char* name) : name_(name) {}
    OpParamDef& ParamType(Option o) { type_ = o; return *this; }
    OpParamDef& DataType(std::vector<ge::DataType> d) { dtypes_ = std::move(d); return *this; }
    OpParamDef& Format(std::vector<ge::Format> f) { formats_ = std::move(f); return *this; }
    OpParamDef& UnknownShapeFormat(std::vector<ge::Format> f) { unknown_ = std::move(f); return *this; }
    OpParamDef& AutoContiguous() { return *this; }
    const std::string& Name() const { return name_; }
    const std::vector<ge::DataType>& DataTypes() const { return dtypes_; }
    const std::vector<ge::Format>& Formats() const { return formats_; }

private:
    std::string name_;
    Option type_ = REQUIRED;
    std::vector<ge::DataType> dtypes_;
    std::vector<ge::Format> formats_, unknown_;
};

class OpAttrDef {
public:
    explicit OpAttrDef(const char* name) : name_(name) {}
    OpAttrDef& AttrType(Option o) { type_ = o; return *this; }
    OpAttrDef& Int() { v_.kind = 'i'; return *this; }
    OpAttrDef& Int(int64_t v) { v_.kind = 'i'; v_.i = v; return *this; }
    OpAttrDef& Float() { v_.kind = 'f'; return *this; }
    OpAttrDef& Float(float v) { v_.kind = 'f'; v_.f = v; return *this; }
    OpAttrDef& Bool() { v_.kind = 'b'; return *this; }
    OpAttrDef& Bool(bool v) { v_.kind = 'b'; v_.b = v; return *this; }
    OpAttrDef& String() { v_.kind = 's'; return *this; }
    OpAttrDef& String(const char* v) { v_.kind = 's'; v_.s = v; return *this; }
    OpAttrDef& ListBool(std::vector<bool> v) { v_.kind = 'L'; v_.lb = std::move(v); return *this; }
    const std::string& Name() const { return name_; }
    const gert::RuntimeAttrs::Value& Default() const { return v_; }
    Option Type() const { return type_; }

private:
    std::string name_;
    Option type_ = OPTIONAL;
    gert::RuntimeAttrs::Value v_;
};

// A per-SoC override of the op's inputs and outputs (CANN's OpAICoreConfig).
class OpAICoreConfig {
public:
    OpParamDef& Input(const char* name) { inputs_.emplace_back(name); return inputs_.back(); }
    OpParamDef& Output(const char* name) { outputs_.emplace_back(name); return outputs_.back(); }
    OpAICoreConfig& DynamicCompileStaticFlag(bool) { return *this; }
    OpAICoreConfig& DynamicFormatFlag(bool) { return *this; }
    OpAICoreConfig& DynamicRankSupportFlag(bool) { return *this; }
    OpAICoreConfig& DynamicShapeSupportFlag(bool) { return *this; }
    OpAICoreConfig& ExtendCfgInfo(const char*, const char*) { return *this; }

private:
    std::vector<OpParamDef> inputs_, outputs_;
};

class OpAICoreDef {
public:
    OpAICoreDef& SetTiling(TilingFunc f) { tiling_ = f; return *this; }
    OpAICoreDef& AddConfig(const char* soc) { socs_.emplace_back(soc); return *this; }
    OpAICoreDef& AddConfig(const char* soc, OpAICoreConfig&) { socs_.emplace_back(soc); return *this; }
    TilingFunc Tiling() const { return tiling_; }
    const std::vector<std::string>& Socs() const { return socs_; }

private:
    TilingFunc tiling_ = nullptr;
    std::vector<std::string> socs_;
};

class OpDef {
public:
    explicit OpDef(const char* name) : name_(name) {}
    virtual ~OpDef() = default;
    OpParamDef& Input(const char* name) { inputs_.emplace_back(name); return inputs_.back(); }
    OpParamDef& Output(const char* name) { outputs_.emplace_back(name); return outputs_.back(); }
    OpAttrDef& Attr(const char* name) { attrs_.emplace_back(name); return attrs_.back(); }
    OpAICoreDef& AICore() { return aicore_; }
    OpDef& SetInferShape(InferShapeFunc f) { infer_shape_ = f; return *this; }
    OpDef& SetInferDataType(InferDataTypeFunc f) { infer_dtype_ = f; return *this; }

    const std::string& Name() const { return name_; }
    const std::vector<OpParamDef>& Inputs() const { return inputs_; }
    const std::vector<OpParamDef>& Outputs() const { return outputs_; }
    const std::vector<OpAttrDef>& Attrs() const { return attrs_; }
    const OpAICoreDef& AICoreDef() const { return aicore_; }
    InferShapeFunc InferShape() const { return infer_shape_; }
    InferDataTypeFunc InferDataType() const { return infer_dtype_; }

private:
    std::string name_;
    std::vector<OpParamDef> inputs_, outputs_;
    std::vector<OpAttrDef> attrs_;
    OpAICoreDef aicore_;
    InferShapeFunc infer_shape_ = nullptr;
    InferDataTypeFunc infer_dtype_ = nullptr;
};

// Every OpDef a library registered with OP_ADD, by op type.
inline std::map<std::string, std::unique_ptr<OpDef>>& registry() {
    static std::map<std::string, std::unique_ptr<OpDef>> defs;
    return defs;
}
struct OpAdder {
    OpAdder(const char* name, std::unique_ptr<OpDef> def) { registry()[name] = std::move(def); }
};

}  // namespace ops

#define OP_ADD(cls) static ::ops::OpAdder opgen_op_adder_##cls(#cls, std::unique_ptr<::ops::OpDef>(new cls(#cls)))

namespace opgen_emu_host {

// The attributes at their OpDef defaults, overridden by `overrides` ("name=value;..."): what a
// caller of the op sets. A REQUIRED attribute the caller does not set has no value: its
// GetAttrPointer / GetInt is nullptr, as on a TilingContext whose op lacks it.
inline gert::RuntimeAttrs attrs_of(const ops::OpDef& def, const char* overrides) {
    gert::RuntimeAttrs attrs;
    for (const auto& a : def.Attrs()) {
        attrs.values().push_back(a.Default());
        if (a.Type() == ops::REQUIRED) attrs.values().back().kind = 0;
    }
    std::string text = overrides ? overrides : "";
    size_t pos = 0;
    while (pos < text.size()) {
        size_t end = text.find(';', pos);
        std::string item = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
        pos = end == std::string::npos ? text.size() : end + 1;
        size_t eq = item.find('=');
        for (size_t i = 0; eq != std::string::npos && i < def.Attrs().size(); ++i) {
            if (def.Attrs()[i].Name() != item.substr(0, eq)) continue;
            auto& v = attrs.values()[i];
            v.kind = def.Attrs()[i].Default().kind;
            std::string value = item.substr(eq + 1);
            if (v.kind == 'i') v.i = std::stoll(value);
            if (v.kind == 'f') v.f = std::stof(value);
            if (v.kind == 'b') v.b = value == "1" || value == "true";
            if (v.kind == 's') v.s = value;
        }
    }
    return attrs;
}

inline std::vector<gert::StorageShape> shapes_of(uint32_t n, const uint32_t* ranks, const int64_t* dims) {
    std::vector<gert::StorageShape> out;
    for (uint32_t i = 0, k = 0; i < n; ++i) {
        gert::Shape s;
        for (uint32_t r = 0; r < ranks[i]; ++r) s.AppendDim(dims[k++]);
        out.emplace_back(s);
    }
    return out;
}

inline const ops::OpDef* find_def(const char* op_type) {
    auto& defs = ops::registry();
    auto it = defs.find(op_type);
    if (it != defs.end()) return it->second.get();
    last_error() = std::string("no OpDef named ") + op_type + " was registered (OP_ADD)";
    return nullptr;
}

}  // namespace opgen_emu_host

// Runs the TilingFunc that `op_type`'s OpDef registered, on a TilingContext of the given
// inputs/outputs (ranks, then all dims flat; ge::DataType codes), attributes and platform.
// Returns 0 (outputs written), 1 (the TilingFunc failed: opgen_emu_host_last_error says why),
// 2 (no such op or no TilingFunc), 3 (the tiling data does not fit tiling_capacity bytes).
extern "C" __attribute__((weak, visibility("default"))) int opgen_emu_tiling(
    const char* op_type, uint32_t n_in, const uint32_t* in_ranks, const int64_t* in_dims, const int32_t* in_dtypes,
    uint32_t n_out, const uint32_t* out_ranks, const int64_t* out_dims, const int32_t* out_dtypes,
    const char* attrs, uint32_t vector_cores, uint64_t ub_bytes, const char* soc, uint64_t* tiling_key,
    uint32_t* block_dim, uint64_t* workspace_bytes, void* tiling, uint64_t tiling_capacity, uint64_t* tiling_bytes) {
    using namespace opgen_emu_host;
    last_error().clear();
    const ops::OpDef* def = find_def(op_type);
    if (!def) return 2;
    if (!def->AICoreDef().Tiling()) {
        last_error() = std::string(op_type) + ": the OpDef registers no TilingFunc (AICore().SetTiling)";
        return 2;
    }
    std::vector<ge::DataType> idt, odt;
    for (uint32_t i = 0; i < n_in; ++i) idt.push_back(static_cast<ge::DataType>(in_dtypes[i]));
    for (uint32_t i = 0; i < n_out; ++i) odt.push_back(static_cast<ge::DataType>(out_dtypes[i]));
    gert::TilingContext ctx(shapes_of(n_in, in_ranks, in_dims), idt, shapes_of(n_out, out_ranks, out_dims), odt,
                            attrs_of(*def, attrs), fe::PlatFormInfos{vector_cores, ub_bytes, soc}, def->Name().c_str());
    try {
        if (def->AICoreDef().Tiling()(&ctx) != ge::GRAPH_SUCCESS) {
            if (last_error().empty()) last_error() = std::string(op_type) + ": the TilingFunc failed";
            return 1;
        }
    } catch (const std::exception& e) {
        last_error() = std::string(op_type) + ": the TilingFunc threw: " + e.what();
        return 1;
    }
    gert::TilingData* data = ctx.GetRawTilingData();
    if (data->GetDataSize() > tiling_capacity) return 3;
    std::memcpy(tiling, data->GetData(), data->GetDataSize());
    *tiling_bytes = data->GetDataSize();
    *tiling_key = ctx.GetTilingKey();
    *block_dim = ctx.GetBlockDim();
    uint64_t total = 0;
    for (size_t i = 0; i < ctx.GetWorkspaceNum(); ++i) total += ctx.GetWorkspaceSizes(0)[i];
    *workspace_bytes = total;
    return 0;
}

// Runs InferShape and InferDataType of `op_type` on the given input shapes and dtypes; writes
// each output's rank (out_ranks), dims (out_dims, at most 8 per output) and dtype. 0 on success.
extern "C" __attribute__((weak, visibility("default"))) int opgen_emu_infer(
    const char* op_type, uint32_t n_in, const uint32_t* in_ranks, const int64_t* in_dims, const int32_t* in_dtypes,
    uint32_t n_out, const char* attrs, uint32_t* out_ranks, int64_t* out_dims, int32_t* out_dtypes) {
    using namespace opgen_emu_host;
    last_error().clear();
    const ops::OpDef* def = find_def(op_type);
    if (!def || !def->InferShape() || !def->InferDataType()) {
        if (def) last_error() = std::string(op_type) + ": the OpDef registers no InferShape/InferDataType";
        return 2;
    }
    gert::RuntimeAttrs ra = attrs_of(*def, attrs);
    std::vector<gert::Shape> in;
    for (auto& s : shapes_of(n_in, in_ranks, in_dims)) in.push_back(s.GetStorageShape());
    gert::InferShapeContext sctx(in, n_out, &ra);
    std::vector<ge::DataType> idt;
    for (uint32_t i = 0; i < n_in; ++i) idt.push_back(static_cast<ge::DataType>(in_dtypes[i]));
    gert::InferDataTypeContext dctx(idt, n_out);
    if (def->InferShape()(&sctx) != ge::GRAPH_SUCCESS || def->InferDataType()(&dctx) != ge::GRAPH_SUCCESS) return 1;
    for (uint32_t i = 0; i < n_out; ++i) {
        const gert::Shape* s = sctx.GetOutputShape(i);
        out_ranks[i] = static_cast<uint32_t>(s->GetDimNum());
        for (size_t r = 0; r < s->GetDimNum() && r < 8; ++r) out_dims[i * 8 + r] = s->GetDim(r);
        out_dtypes[i] = dctx.GetOutputDataType(i);
    }
    return 0;
}

extern "C" __attribute__((weak, visibility("default"))) const char* opgen_emu_host_last_error(void) {
    return opgen_emu_host::last_error().c_str();
}

#endif  // OPGEN_EMU_HOST_OP_DEF_REGISTRY_H
