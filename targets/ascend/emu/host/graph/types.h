// opgen's emulation of CANN's host-side types (ge:: and gert::), the subset an op_host tiling,
// InferShape and InferDataType use. Modelled on CANN's documented API (graph/types.h,
// exe_graph/runtime/{shape,storage_shape,tiling_context,infer_shape_context}.h); checked only
// against the documentation, never against a CANN toolkit.
#ifndef OPGEN_EMU_HOST_GRAPH_TYPES_H
#define OPGEN_EMU_HOST_GRAPH_TYPES_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace ge {
enum DataType : int32_t { DT_FLOAT = 0, DT_FLOAT16 = 1, DT_INT8 = 2, DT_INT32 = 3, DT_INT64 = 9, DT_BOOL = 12, DT_BF16 = 27,
                          DT_UNDEFINED = 28 };
enum Format : int32_t { FORMAT_NCHW = 0, FORMAT_NHWC = 1, FORMAT_ND = 2 };
using graphStatus = uint32_t;
constexpr graphStatus GRAPH_SUCCESS = 0;
constexpr graphStatus GRAPH_FAILED = 0xFFFFFFFF;
}  // namespace ge

namespace fe {
// The platform a tiling runs for: what PlatformAscendC reads (the product's hardware description).
struct PlatFormInfos {
    uint32_t vector_cores = 0;
    uint64_t ub_bytes = 0;
    std::string soc;
};
}  // namespace fe

namespace gert {

class Shape {
public:
    Shape() = default;
    Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
    size_t GetDimNum() const { return dims_.size(); }
    int64_t GetDim(size_t i) const {
        if (i >= dims_.size()) throw std::out_of_range("gert::Shape::GetDim: index beyond the rank");
        return dims_[i];
    }
    void SetDimNum(size_t n) { dims_.resize(n, 1); }
    void SetDim(size_t i, int64_t v) {
        if (i >= dims_.size()) throw std::out_of_range("gert::Shape::SetDim: index beyond the rank");
        dims_[i] = v;
    }
    Shape& AppendDim(int64_t v) { dims_.push_back(v); return *this; }
    int64_t GetShapeSize() const {
        int64_t n = 1;
        for (int64_t d : dims_) n *= d;
        return n;
    }
    bool operator==(const Shape& o) const { return dims_ == o.dims_; }

private:
    std::vector<int64_t> dims_;
};

class StorageShape {
public:
    StorageShape() = default;
    explicit StorageShape(const Shape& s) : origin_(s), storage_(s) {}
    const Shape& GetOriginShape() const { return origin_; }
    const Shape& GetStorageShape() const { return storage_; }
    Shape& MutableOriginShape() { return origin_; }
    Shape& MutableStorageShape() { return storage_; }

private:
    Shape origin_, storage_;
};

class CompileTimeTensorDesc {
public:
    explicit CompileTimeTensorDesc(ge::DataType dt = ge::DT_UNDEFINED) : dt_(dt) {}
    ge::DataType GetDataType() const { return dt_; }
    ge::Format GetOriginFormat() const { return ge::FORMAT_ND; }
    ge::Format GetStorageFormat() const { return ge::FORMAT_ND; }

private:
    ge::DataType dt_;
};

// Attribute values in the OpDef's declaration order (GetAttrPointer<T>(index)).
class RuntimeAttrs {
public:
    struct Value {
        int64_t i = 0;
        float f = 0.0f;
        bool b = false;
        std::string s;
        std::vector<bool> lb;
        char kind = 0;  // 'i' 'f' 'b' 's' 'L'
    };
    template <typename T>
    const T* GetAttrPointer(size_t index) const {
        if constexpr (std::is_same<T, int64_t>::value) {
            const Value* v = at(index, 'i');
            return v ? &v->i : nullptr;
        } else if constexpr (std::is_same<T, float>::value) {
            const Value* v = at(index, 'f');
            return v ? &v->f : nullptr;
        } else {
            static_assert(std::is_same<T, bool>::value, "GetAttrPointer<T>: int64_t, float or bool");
            const Value* v = at(index, 'b');
            return v ? &v->b : nullptr;
        }
    }
    const int64_t* GetInt(size_t index) const { return GetAttrPointer<int64_t>(index); }
    const float* GetFloat(size_t index) const { return GetAttrPointer<float>(index); }
    const bool* GetBool(size_t index) const { return GetAttrPointer<bool>(index); }
    const char* GetStr(size_t index) const {
        const Value* v = at(index, 's');
        return v ? v->s.c_str() : nullptr;
    }
    size_t GetAttrNum() const { return values_.size(); }
    std::vector<Value>& values() { return values_; }

private:
    const Value* at(size_t index, char kind) const {
        return index < values_.size() && values_[index].kind == kind ? &values_[index] : nullptr;
    }
    std::vector<Value> values_;
};
class TilingData {
public:
    explicit TilingData(size_t capacity) : bytes_(capacity, 0) {}
    void* GetData() { return bytes_.data(); }
    size_t GetCapacity() const { return bytes_.size(); }
    size_t GetDataSize() const { return size_; }
    void SetDataSize(size_t n) {
        if (n > bytes_.size()) throw std::length_error("TilingData::SetDataSize: beyond the capacity");
        size_ = n;
    }

private:
    std::vector<uint8_t> bytes_;
    size_t size_ = 0;
};

// The context a TilingFunc runs in: input/output shapes and dtypes, attributes, the platform;
// what it sets: tiling key, block dim, workspace sizes and the tiling data.
class TilingContext {
public:
    TilingContext(std::vector<StorageShape> in, std::vector<ge::DataType> in_dt, std::vector<StorageShape> out,
                  std::vector<ge::DataType> out_dt, RuntimeAttrs attrs, fe::PlatFormInfos platform, const char* name)
        : in_(std::move(in)), out_(std::move(out)), attrs_(std::move(attrs)), platform_(std::move(platform)),
          name_(name) {
        for (auto d : in_dt) in_desc_.emplace_back(d);
        for (auto d : out_dt) out_desc_.emplace_back(d);
    }
    const StorageShape* GetInputShape(size_t i) const { return i < in_.size() ? &in_[i] : nullptr; }
    const StorageShape* GetOptionalInputShape(size_t i) const { return GetInputShape(i); }
    const StorageShape* GetOutputShape(size_t i) const { return i < out_.size() ? &out_[i] : nullptr; }
    const CompileTimeTensorDesc* GetInputDesc(size_t i) const { return i < in_desc_.size() ? &in_desc_[i] : nullptr; }
    const CompileTimeTensorDesc* GetOutputDesc(size_t i) const {
        return i < out_desc_.size() ? &out_desc_[i] : nullptr;
    }
    const RuntimeAttrs* GetAttrs() const { return &attrs_; }
    fe::PlatFormInfos* GetPlatformInfo() const { return &platform_; }   // non-const, as metadef's
    const char* GetNodeName() const { return name_; }
    const char* GetNodeType() const { return name_; }
    ge::graphStatus SetTilingKey(uint64_t key) { key_ = key; return ge::GRAPH_SUCCESS; }
    uint64_t GetTilingKey() const { return key_; }
    ge::graphStatus SetBlockDim(uint32_t n) { block_dim_ = n; return ge::GRAPH_SUCCESS; }
    uint32_t GetBlockDim() const { return block_dim_; }
    size_t* GetWorkspaceSizes(size_t num) {
        if (workspace_.size() < num) workspace_.resize(num, 0);
        return workspace_.data();
    }
    size_t GetWorkspaceNum() const { return workspace_.size(); }
    TilingData* GetRawTilingData() { return &tiling_; }
    // The tiling data as the standard C++ struct T (CANN's GetTilingData<T>): sized to T.
    template <typename T>
    T* GetTilingData() {
        tiling_.SetDataSize(sizeof(T));
        return static_cast<T*>(tiling_.GetData());
    }

private:
    std::vector<StorageShape> in_, out_;
    std::vector<CompileTimeTensorDesc> in_desc_, out_desc_;
    RuntimeAttrs attrs_;
    mutable fe::PlatFormInfos platform_;
    const char* name_;
    uint64_t key_ = 0;
    uint32_t block_dim_ = 0;
    std::vector<size_t> workspace_;
    TilingData tiling_{64 * 1024};
};

class InferShapeContext {
public:
    InferShapeContext(std::vector<Shape> in, size_t n_out, const RuntimeAttrs* attrs)
        : in_(std::move(in)), out_(n_out), attrs_(attrs) {}
    const Shape* GetInputShape(size_t i) const { return i < in_.size() ? &in_[i] : nullptr; }
    const Shape* GetOptionalInputShape(size_t i) const { return GetInputShape(i); }
    Shape* GetOutputShape(size_t i) { return i < out_.size() ? &out_[i] : nullptr; }
    const RuntimeAttrs* GetAttrs() const { return attrs_; }

private:
    std::vector<Shape> in_, out_;
    const RuntimeAttrs* attrs_;
};

class InferDataTypeContext {
public:
    InferDataTypeContext(std::vector<ge::DataType> in, size_t n_out) : in_(std::move(in)), out_(n_out, ge::DT_UNDEFINED) {}
    ge::DataType GetInputDataType(size_t i) const { return i < in_.size() ? in_[i] : ge::DT_UNDEFINED; }
    ge::DataType GetOutputDataType(size_t i) const { return i < out_.size() ? out_[i] : ge::DT_UNDEFINED; }
    ge::graphStatus SetOutputDataType(size_t i, ge::DataType d) {
        if (i >= out_.size()) return ge::GRAPH_FAILED;
        out_[i] = d;
        return ge::GRAPH_SUCCESS;
    }

private:
    std::vector<ge::DataType> in_, out_;
};

}  // namespace gert

#endif  // OPGEN_EMU_HOST_GRAPH_TYPES_H
